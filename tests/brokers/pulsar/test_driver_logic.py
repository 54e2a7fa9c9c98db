"""Pure logic of the Pulsar driver (no server): stats parsing, the admin API's redirects,
a batch's send and its checks, the senders' shared client, settings. The same driver runs
against the real Pulsar cluster in tests/brokers/test_contract.py."""

from __future__ import annotations

import http.server
import threading
from pathlib import Path
from typing import Any

import pulsar
import pytest

from mqlab import typed
from mqlab.brokers.base import Endpoints, NodeEndpoint
from mqlab.brokers.pulsar import cluster as pc
from mqlab.brokers.pulsar import driver as pd
from mqlab.errors import DriverError, ScenarioError


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
    """pulsar-client's C++ producer as the sender uses it: each message's result handed to
    its callback as ``results`` says (None: no result ever), the last acknowledged
    sequence id moved by ``acked`` per message (default: the Ok ones), ``flush`` raising
    ``flush_error``."""

    def __init__(self) -> None:
        self.sent: list[bytes] = []
        self.seq = -1
        self.results: list[Any] | None = None
        self.acked: int | None = None
        self.flush_error: Exception | None = None

    def last_sequence_id(self) -> int:
        return self.seq

    def send_async(self, message: Any, callback: Any) -> None:
        i = len(self.sent)
        self.sent.append(message.data())
        result = pulsar.Result.Ok if self.results is None else self.results[i]
        if result is not None:
            callback(result, None)
        if self.acked is None and result == pulsar.Result.Ok:
            self.seq += 1

    def flush(self) -> None:
        if self.acked is not None:
            self.seq += self.acked
        if self.flush_error is not None:
            raise self.flush_error


def _sender() -> tuple[pd.PulsarSender, _Producer]:
    sender = object.__new__(pd.PulsarSender)
    producer = _Producer()
    sender.p = producer  # type: ignore[assignment]
    return sender, producer


def test_a_send_hands_every_message_to_the_producer_and_returns_once_all_are_acknowledged() -> None:
    sender, producer = _sender()
    sender.send([b"a", b"bb", b"ccc"])
    sender.send([b"d"])
    assert producer.sent == [b"a", b"bb", b"ccc", b"d"] and producer.seq == 3


def test_a_message_whose_result_is_an_error_fails_the_send() -> None:
    sender, producer = _sender()
    producer.results = [pulsar.Result.Ok, pulsar.Result.Timeout, pulsar.Result.Ok]
    with pytest.raises(DriverError, match="2 of 3 messages acknowledged.*Timeout"):
        sender.send([b"a", b"b", b"c"])


def test_a_batch_the_producer_did_not_acknowledge_whole_fails_though_no_error_came() -> None:
    sender, producer = _sender()
    producer.results = [pulsar.Result.Ok, None]  # the second's result never came
    with pytest.raises(DriverError, match="1 of 2 messages acknowledged"):
        sender.send([b"ok", b"never"])
    sender, producer = _sender()
    producer.acked = 1  # results Ok, but the producer acknowledged only one of them
    with pytest.raises(DriverError, match="1 of 2 messages acknowledged"):
        sender.send([b"a", b"b"])


def test_a_batch_acknowledged_with_an_earlier_failed_batchs_messages_is_confirmed() -> None:
    sender, producer = _sender()
    producer.acked = 3  # its 2 and one of an earlier batch whose flush had failed
    sender.send([b"a", b"b"])
    assert producer.seq == 2


def test_a_failed_flush_fails_the_send() -> None:
    sender, producer = _sender()
    producer.flush_error = pulsar.Timeout("flush")  # type: ignore[attr-defined]
    with pytest.raises(DriverError, match="pulsar: send failed"):
        sender.send([b"a"])


def test_a_drivers_senders_share_one_client_closed_with_the_last() -> None:
    made: list[Any] = []

    class Client:
        closed = False

        def close(self) -> None:
            self.closed = True

    def make() -> Any:
        made.append(Client())
        return made[-1]

    shared = pd.SharedClient(make)
    a, b = shared.open(), shared.open()
    assert a is b and len(made) == 1
    shared.close()
    assert not a.closed
    shared.close()
    assert a.closed
    assert shared.open() is not a and len(made) == 2  # a new sender after that: a new client
