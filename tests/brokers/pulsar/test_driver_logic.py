"""Pure logic of the Pulsar driver (no server): metrics and stats parsing, what remaining()
reports, the send callbacks of a batch, settings. The same driver runs against the real
pulsar-lite server in tests/brokers/test_contract.py."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pulsar
import pytest

from mqlab import typed
from mqlab.brokers.base import Endpoints, NodeEndpoint, Remaining
from mqlab.brokers.pulsar import driver as pd
from mqlab.errors import DriverError, ScenarioError

PAGE = """\
# HELP pulsar_in_messages_total Total messages accepted for publish
# TYPE pulsar_in_messages_total counter
pulsar_in_messages_total{cluster="pulsar-lite",namespace="public/default",partition="-1",\
topic="q"} 20
pulsar_in_messages_total{cluster="pulsar-lite",namespace="public/default",partition="-1",\
topic="other"} 7
pulsar_lite_subscription_acked_messages_total{cluster="pulsar-lite",namespace="public/default",\
partition="-1",subscription="q-workers",topic="q"} 5
pulsar_lite_subscription_acked_messages_total{cluster="pulsar-lite",namespace="public/default",\
partition="-1",subscription="another",topic="q"} 19
pulsar_subscription_back_log{cluster="pulsar-lite",namespace="public/default",partition="-1",\
subscription="q-workers",topic="q"} 20
pulsar_subscription_unacked_messages{cluster="pulsar-lite",namespace="public/default",\
partition="-1",subscription="q-workers",topic="q"} 15
pulsar_broker_msg_backlog 99
process_start_time_seconds 1795395769
"""


def test_metrics_are_read_for_the_topic_and_subscription_only() -> None:
    stats = pd.parse_metrics(PAGE, "q", "q-workers")
    assert stats == {
        "in": 20.0,
        "acked": 5.0,
        "backlog": 20.0,
        "unacked": 15.0,
        "started": 1795395769.0,
    }
    assert pd.parse_metrics(PAGE, "absent", "q-workers") == {"started": 1795395769.0}


def test_remaining_is_stored_minus_acked_while_the_server_is_the_same() -> None:
    stats = pd.parse_metrics(PAGE, "q", "q-workers")
    # acks out of order: the backlog gauge (20) still counts the 5 acked; the counters do not
    assert pd.lite_remaining(stats, 1795395769.0) == Remaining(15, None, None)
    # restarted since setup (or never recorded): the counters began later; the gauge
    for started in (1795390000.0, None):
        assert pd.lite_remaining(stats, started) == Remaining(20, None, 15)
    no_counters = {k: v for k, v in stats.items() if k not in ("in", "acked")}
    assert pd.lite_remaining(no_counters, 1795395769.0) == Remaining(20, None, 15)
    assert pd.lite_remaining({"started": 1.0}, 1.0) is None
    assert pd.lite_remaining({"in": 3, "acked": 5, "started": 1.0}, 1.0) == Remaining(0)


def test_admin_topic_stats_give_backlog_and_unacked_of_the_subscription() -> None:
    stats = {
        "subscriptions": {
            "q-workers": {"msgBacklog": 12, "unackedMessages": 4},
            "x": {"msgBacklog": 1},
        }
    }
    assert pd.parse_topic_stats(stats, "q-workers") == (12, 4)
    assert pd.parse_topic_stats({"subscriptions": {}}, "q-workers") is None


def _endpoints(**extra: Any) -> Endpoints:
    return Endpoints("pulsar", (NodeEndpoint(0, "127.0.0.1", 6650),), extra)


def test_names_and_timeouts_follow_the_queue_and_settings() -> None:
    s = pd.Settings(ensemble_size=1, write_quorum=1, ack_quorum=1, ack_timeout_s=12.5)
    d = pd.PulsarDriver(s, _endpoints(stand_in=True), "q")
    assert d.topic == "persistent://public/default/q" and d.subscription == "q-workers"
    assert d.redelivery_timeout_s == 12.5
    assert pd.service_url(d.endpoints) == "pulsar://127.0.0.1:6650"
    assert d.server_versions() == []  # neither a launcher's version nor an admin API
    assert pd.PulsarDriver(s, _endpoints(server="pulsar-lite 0.2.0"), "q").server_versions() == [
        "pulsar-lite 0.2.0"
    ]


def test_the_profile_cannot_ask_for_an_ack_timeout_pulsar_client_refuses() -> None:
    with pytest.raises(ScenarioError, match="ack_timeout_s"):
        typed.build(pd.Settings, {"ack_timeout_s": 5}, Path("p.toml"), "settings")


@pytest.mark.parametrize(
    ("copies", "why"),
    [((3, 3, 2), "keeps one copy"), ((1, 2, 1), "does not hold"), ((3, 2, 3), "does not hold")],
)
def test_setup_refuses_copies_the_server_cannot_keep(
    copies: tuple[int, int, int], why: str
) -> None:
    e, w, a = copies
    s = pd.Settings(ensemble_size=e, write_quorum=w, ack_quorum=a)
    d = pd.PulsarDriver(s, _endpoints(metrics_url="http://127.0.0.1:1/metrics"), "q")
    with pytest.raises(DriverError, match=why):
        d.setup()  # refused before any connection


class _Producer:
    """Records send_async callbacks; the test decides when they fire."""

    def __init__(self) -> None:
        self.callbacks: list[Any] = []

    def send_async(self, _content: bytes, callback: Any) -> None:
        self.callbacks.append(callback)

    def flush(self) -> None:
        pass


def _sender(timeout_s: float = 0.3) -> tuple[pd.PulsarSender, _Producer]:
    sender = object.__new__(pd.PulsarSender)
    producer = _Producer()
    sender.timeout = timeout_s
    sender.done = threading.Condition()
    sender.batch, sender.waiting, sender.errors = 0, 0, []
    sender.producer = producer  # type: ignore[assignment]
    return sender, producer


def _fire(callbacks: list[Any], result: Any = pulsar.Result.Ok) -> None:
    for cb in callbacks:
        cb(result, None)


def test_a_send_returns_once_every_callback_of_its_batch_came() -> None:
    sender, producer = _sender()

    def confirm_later() -> None:
        while len(producer.callbacks) < 3:
            time.sleep(0.001)
        _fire(producer.callbacks)

    t = threading.Thread(target=confirm_later)
    t.start()
    sender.send([b"a", b"b", b"c"])
    t.join()
    assert sender.waiting == 0 and sender.errors == []


def test_a_failed_callback_fails_the_send_and_a_missing_one_times_it_out() -> None:
    sender, producer = _sender()
    producer.send_async = lambda _m, cb: cb(pulsar.Result.Timeout, None)  # type: ignore[method-assign]
    with pytest.raises(DriverError, match="Timeout"):
        sender.send([b"a"])

    sender, producer = _sender(timeout_s=0.1)

    def only_the_first(m: bytes, cb: Any) -> None:
        if m == b"ok":
            cb(pulsar.Result.Ok, None)

    producer.send_async = only_the_first  # type: ignore[method-assign]
    with pytest.raises(DriverError, match="1 of 2 messages unconfirmed"):
        sender.send([b"ok", b"never"])


def test_late_callbacks_of_a_failed_batch_never_count_for_a_later_one() -> None:
    sender, producer = _sender(timeout_s=0.1)
    with pytest.raises(DriverError):
        sender.send([b"1"])  # its callback does not come in time
    (late,) = producer.callbacks

    def late_success_only(_m: bytes, _cb: Any) -> None:
        late(pulsar.Result.Ok, None)  # batch 1's success arrives; batch 2's own never does

    producer.send_async = late_success_only  # type: ignore[method-assign]
    with pytest.raises(DriverError, match="1 of 1 messages unconfirmed"):
        sender.send([b"2"])

    def late_failure_then_own_success(_m: bytes, cb: Any) -> None:
        late(pulsar.Result.Timeout, None)  # logged, not counted
        cb(pulsar.Result.Ok, None)

    producer.send_async = late_failure_then_own_success  # type: ignore[method-assign]
    sender.send([b"3"])
