"""Pure logic of the Artemis driver (no server): the frames it writes for Artemis and for
ActiveMQ 5, statistics and management replies, and what its sender and receiver do with
receipts, errors, lost connections and acks. A fake connection stands in for
``mqlab.brokers.artemis.conn`` here (its frames and socket: tests/brokers/artemis/test_conn.py).
The same driver runs against the real local Artemis cluster in tests/brokers/test_contract.py
and tests/brokers/artemis/."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from mqlab import typed
from mqlab.brokers.artemis import driver as ad
from mqlab.brokers.artemis import wire
from mqlab.brokers.base import Delivery, Endpoints, NodeEndpoint
from mqlab.errors import DriverError, ScenarioError
from tests.conftest import CountingCondition

ARTEMIS = "ActiveMQ-Artemis/2.27.1 ActiveMQ Artemis Messaging Engine"
CLASSIC = "ActiveMQ/5.17.2"

STATS = b"""<map>
  <entry><string>size</string><long>12</long></entry>
  <entry><string>inflightCount</string><long>4</long></entry>
  <entry><string>averageEnqueueTime</string><double>1.5</double></entry>
  <entry><string>destinationName</string><string>queue://q</string></entry>
  <entry><string>memoryPercentUsage</string><int>0</int></entry>
</map>"""


def test_the_server_header_names_the_broker() -> None:
    assert wire.is_artemis(ARTEMIS) and not wire.is_artemis(CLASSIC) and not wire.is_artemis("")


def test_artemis_gets_an_anycast_queue_and_activemq_a_queue_destination() -> None:
    assert ad.destination("q", artemis=True) == "q"
    assert ad.destination("q", artemis=False) == "/queue/q"
    assert ad.send_headers(True) == {"persistent": "true", "destination-type": "ANYCAST"}
    assert ad.send_headers(False) == {"persistent": "true"}


def test_prefetch_is_messages_on_activemq_and_a_byte_window_on_artemis() -> None:
    s = ad.Settings(prefetch=50, window_bytes_per_message=1100)
    assert ad.subscribe_headers(s, False) == {"activemq.prefetchSize": "50"}
    assert ad.subscribe_headers(s, True) == {
        "subscription-type": "ANYCAST",
        "consumer-window-size": "55000",
    }


def test_settings_are_validated() -> None:
    assert typed.build(ad.Settings, {}, Path("p.toml"), "settings") == ad.Settings()
    for bad in ({"prefetch": 0}, {"window_bytes_per_message": 8}, {"receipt_timeout_s": 0}):
        with pytest.raises(ScenarioError):
            typed.build(ad.Settings, bad, Path("p.toml"), "settings")


def test_statistics_map_is_read_with_its_types() -> None:
    assert ad.parse_stats_map(STATS) == {
        "size": 12,
        "inflightCount": 4,
        "averageEnqueueTime": 1.5,
        "destinationName": "queue://q",
        "memoryPercentUsage": 0,
    }
    assert not ad.stats_end(STATS)
    assert ad.stats_end(b"<map/>")  # the plugin's end marker: an empty map
    assert ad.stats_end(b"not xml")  # anything else ends the replies too
    with pytest.raises(DriverError):
        ad.parse_stats_map(b"<list/>")


def test_management_frames_and_results() -> None:
    dest, body, headers = ad.management_frame("queue.q", "r1", attribute="messageCount")
    assert dest == "activemq.management" and body == b""
    assert headers == {
        "_AMQ_ResourceName": "queue.q",
        "_AMQ_Attribute": "messageCount",
        "reply-to": "r1",
    }
    _, body, headers = ad.management_frame(
        "broker", "r2", operation="destroyQueue", params=["q", True, True]
    )
    assert body == b'["q", true, true]' and headers["_AMQ_OperationName"] == "destroyQueue"
    assert ad.management_result({"_AMQ_OperationSucceeded": "true"}, b"[17]") == 17
    assert ad.management_result({"_AMQ_OperationSucceeded": "true"}, b"") is None
    with pytest.raises(DriverError, match="failed"):
        ad.management_result({"_AMQ_OperationSucceeded": "false"}, b'["no such queue"]')
    with pytest.raises(DriverError, match="unreadable"):
        ad.management_result({"_AMQ_OperationSucceeded": "true"}, b"{oops")


# -- sender and receiver over a fake connection ------------------------------------------
@dataclass
class Frame:
    headers: dict[str, str]
    body: bytes = b""


@dataclass
class FakeConn:
    """Records the frames written; answers each receipt at once (unless ``refuse`` names a
    command, answered with an ERROR frame for that receipt, or ``silent``)."""

    link: Any = None
    frames: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    refuse: str | None = None
    silent: bool = False
    fail_writes: bool = False

    def _write(self, cmd: str, **frame: Any) -> None:
        if self.fail_writes:
            raise OSError("broken pipe")
        self.frames.append((cmd, frame))
        rid = frame.get("receipt") or (frame.get("headers") or {}).get("receipt")
        if rid is None or self.silent:
            return
        if cmd == self.refuse:
            self.link.on_error(Frame({"receipt-id": rid, "message": f"{cmd} refused"}))
        else:
            self.link.on_receipt(Frame({"receipt-id": rid}))

    def send(self, destination: str, body: bytes, headers: dict[str, str]) -> None:
        self._write("SEND", destination=destination, body=body, headers=headers)

    def subscribe(self, destination: str, id: str, ack: str, headers: dict[str, str]) -> None:
        self._write("SUBSCRIBE", destination=destination, id=id, ack=ack, headers=headers)

    def ack_many(self, ids: list[str], receipt: str | None) -> None:
        if self.fail_writes:
            raise OSError("broken pipe")
        for i in ids[:-1]:
            self.frames.append(("ACK", {"id": i, "receipt": None}))
        self._write("ACK", id=ids[-1], receipt=receipt)

    def disconnect(self, receipt: str) -> None:
        self.frames.append(("DISCONNECT", {"receipt": receipt}))
        self.link.on_disconnected()

    def close_socket(self) -> None:
        pass


class FakeDriver(ad.ArtemisDriver):
    """The driver with ``connect`` handing out links over fake connections."""

    def __init__(self, server: str, settings: ad.Settings | None = None) -> None:
        ep = Endpoints("artemis", (NodeEndpoint(0, "127.0.0.1", 1),))
        super().__init__(settings or ad.Settings(receipt_timeout_s=0.2), ep, "q")
        self.server = server
        self.links: list[ad.Link] = []

    def connect(
        self,
        cond: Any = None,
        on_message: Any = None,
        text_bodies: bool = False,
        lean: bool = False,
    ) -> Any:
        conn = FakeConn()
        link = ad.Link(conn, cond or threading.Condition(), on_message)
        conn.link = link
        link.on_connected(Frame({"server": self.server}))
        self.links.append(link)
        return link


def _frames(link: ad.Link, cmd: str) -> list[dict[str, Any]]:
    return [f for c, f in link.conn.frames if c == cmd]


@pytest.mark.parametrize("server", [ARTEMIS, CLASSIC])
def test_a_batch_is_one_send_per_message_each_with_its_receipt(server: str) -> None:
    driver = FakeDriver(server)
    s = driver.sender()
    s.send([b"a", b"b", b"c"])
    sends = _frames(driver.links[0], "SEND")
    assert [f["body"] for f in sends] == [b"a", b"b", b"c"]
    assert len({f["headers"]["receipt"] for f in sends}) == 3
    assert all(f["headers"]["persistent"] == "true" for f in sends)
    assert {f["destination"] for f in sends} == {ad.destination("q", wire.is_artemis(server))}


def test_a_send_fails_on_an_error_receipt_on_silence_and_on_a_broken_connection() -> None:
    driver = FakeDriver(CLASSIC)
    s = driver.sender()
    conn = driver.links[0].conn
    conn.refuse = "SEND"
    with pytest.raises(DriverError, match="refused"):
        s.send([b"a", b"b"])
    conn.refuse, conn.silent = None, True
    with pytest.raises(DriverError, match="2 of 2 receipts missing after 0.2 s"):
        s.send([b"a", b"b"])
    conn.silent, conn.fail_writes = False, True
    with pytest.raises(DriverError, match="broken pipe"):
        s.send([b"a"])
    assert driver.links[0].lost
    s.send([b"again"])  # the next send connects anew (the failover list)
    assert len(driver.links) == 2 and _frames(driver.links[1], "SEND")[0]["body"] == b"again"


def test_receipts_answered_late_or_for_others_do_not_count() -> None:
    link = FakeDriver(CLASSIC).connect()
    link.on_receipt(Frame({"receipt-id": "r9"}))
    with pytest.raises(DriverError, match="1 of 1 receipts missing"):
        link.wait(["r1"], 0.05, "send")
    link.on_receipt(Frame({"receipt-id": "r1"}))
    link.wait(["r1"], 0.05, "send")
    link.on_error(Frame({"message": "out of the blue"}))  # an ERROR without a receipt id
    link.on_receipt(Frame({"receipt-id": "r2"}))
    with pytest.raises(DriverError, match="out of the blue"):
        link.wait(["r2"], 0.05, "send")


def _message(link_index: int, driver: FakeDriver, ack_id: str, redelivered: bool = False) -> None:
    link = driver.links[link_index]
    headers = {"ack": ack_id, "subscription": "x"}
    if redelivered:
        headers["redelivered"] = "true"
    link.on_messages([Frame(headers, f"m-{ack_id}".encode())])


@pytest.mark.parametrize("server", [ARTEMIS, CLASSIC])
def test_the_receiver_subscribes_client_individual_with_its_read_ahead(server: str) -> None:
    driver = FakeDriver(server, ad.Settings(prefetch=7))
    driver.receiver()
    [sub] = _frames(driver.links[0], "SUBSCRIBE")
    assert sub["ack"] == "client-individual"
    assert sub["destination"] == ad.destination("q", wire.is_artemis(server))
    window = sub["headers"].get("consumer-window-size") or sub["headers"]["activemq.prefetchSize"]
    assert int(window) == (7 * 1048 if wire.is_artemis(server) else 7)


def test_receive_hands_out_what_was_pushed_and_acks_only_what_it_handed_out() -> None:
    driver = FakeDriver(CLASSIC)
    r = driver.receiver()
    assert r.receive(10, 0.05) == []
    for i in range(5):
        _message(0, driver, f"a{i}", redelivered=i == 0)
    got = r.receive(3, 0.05)
    assert [d.payload for d in got] == [b"m-a0", b"m-a1", b"m-a2"]
    assert [d.redelivered for d in got] == [True, False, False]
    r.ack(got)
    acks = _frames(driver.links[0], "ACK")
    assert [f["id"] for f in acks] == ["a0", "a1", "a2"]
    assert [f["receipt"] is not None for f in acks] == [False, False, True]  # the last only
    [next_one] = r.receive(1, 0.05)
    with pytest.raises(DriverError, match="1 of 2 deliveries were not handed out"):
        r.ack([next_one, got[0]])  # got[0] was acked already: the other one is acked
    with pytest.raises(DriverError, match="1 of 1 deliveries were not handed out"):
        r.ack([Delivery(b"x", (1, "never"))])
    assert [f["id"] for f in _frames(driver.links[0], "ACK")] == ["a0", "a1", "a2", "a3"]
    assert [d.payload for d in r.receive(10, 0.05)] == [b"m-a4"]


def test_acks_without_receipts_do_not_wait() -> None:
    driver = FakeDriver(CLASSIC, ad.Settings(ack_receipts=False, receipt_timeout_s=0.2))
    r = driver.receiver()
    driver.links[0].conn.silent = True  # no receipts at all: ack() must not wait for one
    _message(0, driver, "a0")
    r.ack(r.receive(1, 0.05))
    assert _frames(driver.links[0], "ACK") == [{"id": "a0", "receipt": None}]


def test_a_lost_connection_drops_the_buffer_and_refuses_its_deliveries_acks() -> None:
    driver = FakeDriver(CLASSIC)
    r = driver.receiver()
    for i in range(4):
        _message(0, driver, f"a{i}")
    handed = r.receive(2, 0.05)
    driver.links[0].on_disconnected()  # the master died
    assert r.receive(10, 0.05) == []  # subscribes again; the 2 buffered ones are gone
    assert len(driver.links) == 2 and len(_frames(driver.links[1], "SUBSCRIBE")) == 1
    _message(0, driver, "late")  # a frame of the old connection arriving late: ignored
    _message(1, driver, "b0")
    [fresh] = r.receive(10, 0.05)
    assert fresh.payload == b"m-b0"
    with pytest.raises(DriverError, match="2 came on a connection since lost"):
        r.ack([*handed, fresh])
    assert [f["id"] for f in _frames(driver.links[1], "ACK")] == ["b0"]  # only the fresh one
    assert _frames(driver.links[0], "ACK") == []


def test_an_ack_while_the_connection_is_lost_is_refused_without_writing() -> None:
    driver = FakeDriver(CLASSIC)
    r = driver.receiver()
    _message(0, driver, "a0")
    handed = r.receive(1, 0.05)
    driver.links[0].on_disconnected()  # before any receive() has connected again
    with pytest.raises(DriverError, match="1 came on a connection since lost"):
        r.ack(handed)
    assert _frames(driver.links[0], "ACK") == []


def test_receive_wakes_when_a_message_arrives_and_when_the_connection_goes() -> None:
    driver = FakeDriver(CLASSIC)
    r = driver.receiver()
    threading.Timer(0.05, lambda: _message(0, driver, "a0")).start()
    assert [d.payload for d in r.receive(10, 5.0)] == [b"m-a0"]
    threading.Timer(0.05, driver.links[0].on_disconnected).start()
    done = threading.Event()
    out: list[Any] = []

    def call() -> None:
        out.append(r.receive(10, 30.0))
        done.set()

    threading.Thread(target=call, daemon=True).start()
    assert done.wait(10), "receive kept waiting on a lost connection"
    assert out == [[]]


def test_close_disconnects_once() -> None:
    driver = FakeDriver(CLASSIC)
    r = driver.receiver()
    r.close()
    r.close()
    assert [c for c, _ in driver.links[0].conn.frames].count("DISCONNECT") == 1


def test_a_receiver_closed_without_acking_writes_no_ack_and_a_new_one_gets_the_rest() -> None:
    """The broker returns what a DISCONNECTed subscription held (real Artemis: the
    contract suite's redelivery tests); the driver's part is to ACK nothing of it."""
    driver = FakeDriver(ARTEMIS)
    r = driver.receiver()
    for i in range(3):
        _message(0, driver, f"a{i}")
    held = r.receive(2, 0.05)
    r.close()
    assert [c for c, _ in driver.links[0].conn.frames] == ["SUBSCRIBE", "DISCONNECT"]
    with pytest.raises(DriverError, match="came on a connection since lost"):
        r.ack(held)
    other = driver.receiver()  # the broker redelivers: the fake pushes them again
    for i in range(3):
        _message(1, driver, f"a{i}")
    got = other.receive(10, 0.05)
    other.ack(got)
    assert [f["id"] for f in _frames(driver.links[1], "ACK")] == ["a0", "a1", "a2"]


def _handed(driver: FakeDriver, r: Any, ack_id: str) -> list[Delivery]:
    _message(len(driver.links) - 1, driver, ack_id)
    got: list[Delivery] = r.receive(1, 0.05)
    assert [d.payload for d in got] == [f"m-{ack_id}".encode()]
    return got


def test_an_acks_receipt_is_awaited_by_the_next_ack_after_its_own_acks_are_written() -> None:
    driver = FakeDriver(ARTEMIS)  # ack_receipt_wait "next", the default
    r = driver.receiver()
    conn = driver.links[0].conn
    conn.silent = True  # no receipt comes: the ack that wrote it does not wait for it
    r.ack(_handed(driver, r, "a0"))
    conn.silent = False
    with pytest.raises(DriverError, match="the previous ack: 1 of 1 receipts missing after"):
        r.ack(_handed(driver, r, "a1"))
    assert [f["id"] for f in _frames(driver.links[0], "ACK")] == ["a0", "a1"]
    r.ack(_handed(driver, r, "a2"))  # a1's receipt came (the fake answers at once)
    conn.refuse = "ACK"  # an ERROR frame for a3's receipt
    r.ack(_handed(driver, r, "a3"))
    conn.refuse = None
    with pytest.raises(DriverError, match="previous ack: the broker answered ERROR.*ACK refused"):
        r.ack(_handed(driver, r, "a4"))
    assert [f["id"] for f in _frames(driver.links[0], "ACK")] == ["a0", "a1", "a2", "a3", "a4"]


def test_the_previous_acks_connection_lost_before_their_receipt_fails_the_next_ack() -> None:
    driver = FakeDriver(ARTEMIS)
    r = driver.receiver()
    driver.links[0].conn.silent = True
    r.ack(_handed(driver, r, "a0"))
    driver.links[0].on_disconnected()  # a0's ACK may not have been handled: it comes again
    assert r.receive(10, 0.05) == []  # subscribes again
    with pytest.raises(DriverError, match="previous ack: connection lost with 1 of 1 receipts"):
        r.ack(_handed(driver, r, "b0"))
    assert [f["id"] for f in _frames(driver.links[1], "ACK")] == ["b0"]


def test_with_ack_receipt_wait_call_the_ack_waits_for_its_own_receipt() -> None:
    driver = FakeDriver(ARTEMIS, ad.Settings(receipt_timeout_s=0.2, ack_receipt_wait="call"))
    r = driver.receiver()
    driver.links[0].conn.silent = True
    with pytest.raises(DriverError, match="ack: 1 of 1 receipts missing after 0.2 s"):
        r.ack(_handed(driver, r, "a0"))
    with pytest.raises(ScenarioError, match="ack_receipt_wait"):
        typed.build(ad.Settings, {"ack_receipt_wait": "never"}, Path("p.toml"), "settings")


def test_a_waiter_is_woken_by_the_last_receipt_it_misses_only() -> None:
    cond = CountingCondition()
    link = wire.Link(FakeConn(), cond, None)
    link.on_receipt(Frame({"receipt-id": "early"}))  # nobody waits for it: no wake-up
    assert cond.wakeups == 0
    done = threading.Event()
    t = threading.Thread(target=lambda: (link.wait(["r1", "r2", "r3"], 30, "send"), done.set()))
    t.start()
    for _ in range(1000):
        with cond:
            if link.waiting:
                break
        threading.Event().wait(0.01)
    for rid in ("r1", "other", "r2", "r3"):
        link.on_receipt(Frame({"receipt-id": rid}))
    assert done.wait(10)
    t.join()
    assert cond.wakeups == 1 and link.waiting == []
    link.wait(["early"], 0.05, "send")  # answered before it was waited for: counts
