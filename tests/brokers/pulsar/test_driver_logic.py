"""Pure logic of the Pulsar driver (no server): stats parsing, the admin API's redirects,
the send callbacks of a batch, settings. The same driver runs against the real Pulsar
cluster in tests/brokers/test_contract.py."""

from __future__ import annotations

import http.server
import threading
import time
from pathlib import Path
from typing import Any

import pulsar
import pytest

from mqlab import typed
from mqlab.brokers.base import Endpoints, NodeEndpoint
from mqlab.brokers.pulsar import cluster as pc
from mqlab.brokers.pulsar import driver as pd
from mqlab.errors import DriverError, ScenarioError
from tests.conftest import CountingCondition


def test_admin_topic_stats_give_backlog_and_unacked_of_the_subscription() -> None:
    stats = {
        "subscriptions": {
            "q-workers": {"msgBacklog": 12, "unackedMessages": 4},
            "x": {"msgBacklog": 1},
        }
    }
    assert pd.parse_topic_stats(stats, "q-workers") == (12, 4)
    assert pd.parse_topic_stats({"subscriptions": {}}, "q-workers") is None


def test_a_redirect_to_the_owning_broker_is_followed_with_the_same_method_and_body() -> None:
    seen: list[tuple[str, str, bytes]] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_PUT(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            seen.append(("PUT", self.path, body))
            if self.path == "/first":
                self.send_response(307)
                self.send_header("Location", "/owner")
                self.end_headers()
                return
            self.send_response(204 if not body else 200)
            self.end_headers()
            if body:
                self.wfile.write(b"done")

        def log_message(self, *_args: Any) -> None:
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_port}/first"
        assert pd._http("PUT", url, {"a": 1}) == "done"
        assert seen == [("PUT", "/first", b'{"a": 1}'), ("PUT", "/owner", b'{"a": 1}')]
    finally:
        server.shutdown()
        server.server_close()


META = (
    "LedgerMetadata{formatVersion=3, ensembleSize=3, writeQuorumSize=3, ackQuorumSize=2, "
    "state=OPEN, digestType=CRC32C, password=OMITTED, ensembles={0=[127.0.0.1:23182, "
    "127.0.0.1:23180, 127.0.0.1:23181], 7=[127.0.0.1:23182, 127.0.0.1:23183, 127.0.0.1:23181]}, "
    "customMetadata={component=base64:bWFuYWdlZC1sZWRnZXI=}}"
)


def test_a_ledgers_ensembles_and_quorums_are_read_from_its_metadata_text() -> None:
    assert pc.ensembles(META) == [
        ["127.0.0.1:23182", "127.0.0.1:23180", "127.0.0.1:23181"],
        ["127.0.0.1:23182", "127.0.0.1:23183", "127.0.0.1:23181"],
    ]
    assert pc.quorums(META) == (3, 3, 2)
    assert pc.ensembles("LedgerMetadata{}") == [] and pc.quorums("") is None


def _endpoints(**extra: Any) -> Endpoints:
    extra.setdefault("admin_urls", ["http://127.0.0.1:1"])
    return Endpoints("pulsar", (NodeEndpoint(0, "127.0.0.1", 6650),), extra)


def test_names_and_timeouts_follow_the_queue_and_settings() -> None:
    s = pd.Settings(ensemble_size=1, write_quorum=1, ack_quorum=1, ack_timeout_s=12.5)
    d = pd.PulsarDriver(s, _endpoints(), "q")
    assert d.topic == "persistent://public/default/q" and d.subscription == "q-workers"
    assert d.redelivery_timeout_s == 12.5
    assert pd.service_url(d.endpoints) == "pulsar://127.0.0.1:6650"
    assert d.server_versions() == []  # no launcher's version, and no admin API answers
    assert pd.PulsarDriver(s, _endpoints(server="Apache Pulsar 4.2.4"), "q").server_versions() == [
        "Apache Pulsar 4.2.4"
    ]


def test_endpoints_without_an_admin_api_are_refused() -> None:
    s = pd.Settings()
    with pytest.raises(DriverError, match="admin"):
        pd.PulsarDriver(s, Endpoints("pulsar", (NodeEndpoint(0, "127.0.0.1", 6650),), {}), "q")


def test_the_profile_cannot_ask_for_an_ack_timeout_pulsar_client_refuses() -> None:
    with pytest.raises(ScenarioError, match="ack_timeout_s"):
        typed.build(pd.Settings, {"ack_timeout_s": 5}, Path("p.toml"), "settings")


@pytest.mark.parametrize(
    ("copies", "why"),
    [((1, 2, 1), "does not hold"), ((3, 2, 3), "does not hold")],
)
def test_setup_refuses_copies_the_server_cannot_keep(
    copies: tuple[int, int, int], why: str
) -> None:
    e, w, a = copies
    s = pd.Settings(ensemble_size=e, write_quorum=w, ack_quorum=a)
    d = pd.PulsarDriver(s, _endpoints(), "q")
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


def test_the_sender_is_woken_by_its_batchs_last_callback_or_a_failure_only() -> None:
    sender, producer = _sender()
    sender.done = cond = CountingCondition()
    producer.send_async = lambda _m, cb: cb(pulsar.Result.Ok, None)  # type: ignore[method-assign]
    sender.send([b"a", b"b", b"c"])
    assert cond.wakeups == 1  # the third callback's (3 before: one per message)
    outcomes = iter([pulsar.Result.Ok, pulsar.Result.Timeout, pulsar.Result.Ok])
    producer.send_async = lambda _m, cb: cb(next(outcomes), None)  # type: ignore[method-assign]
    with pytest.raises(DriverError, match="Timeout"):
        sender.send([b"d", b"e", b"f"])
    assert cond.wakeups == 3  # the failure wakes it, and so does the callback after it


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
