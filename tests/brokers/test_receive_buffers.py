"""The receive buffers of the NATS and Redis drivers (prefetch), without a server: what a
receive hands out, what an ack sends and when, what close flushes. The real servers are
in the contract suite (tests/brokers/test_contract.py)."""

from __future__ import annotations

import asyncio
import json
import logging
from collections import deque
from types import SimpleNamespace
from typing import Any

import pytest

from mqlab.brokers.base import Delivery, Endpoints, NodeEndpoint
from mqlab.brokers.held import Held
from mqlab.brokers.nats import driver as nats_driver
from mqlab.brokers.nats import receiver as nats_receiver
from mqlab.brokers.redis import driver as redis_driver
from mqlab.brokers.redis import wire as redis_wire
from mqlab.errors import DriverError

# --- NATS ---------------------------------------------------------------------------


def _msg(seq: int, delivered: int = 1) -> Any:
    """A JetStream message as nats-py hands it to a subscription callback."""
    return SimpleNamespace(
        data=f"m{seq}".encode(),
        headers=None,
        subject="q.q",
        reply=f"$JS.ACK.q.q_workers.{delivered}.{seq}.{seq}.0.0",
        metadata=SimpleNamespace(num_delivered=delivered),
    )


def _delivery(seq: int, delivered: int = 1) -> Delivery:
    m = _msg(seq, delivered)
    return Delivery(m.data, m, delivered > 1)


def test_nats_held_hands_out_at_most_max_in_order_keeping_redelivered_flags() -> None:
    held = Held(hold_s=10, key=lambda d: d.handle.reply)
    for seq in range(5):
        held.add([_delivery(seq, delivered=1 + seq % 2)], now=0)
    first = held.take(2)
    assert [d.payload for d in first] == [b"m0", b"m1"]
    assert [d.redelivered for d in first] == [False, True]
    assert [d.payload for d in held.take(10)] == [b"m2", b"m3", b"m4"]
    assert held.take(3) == [] and len(held) == 0


def test_nats_held_messages_cannot_be_acked_nor_acked_twice() -> None:
    held = Held(hold_s=10, key=lambda d: d.handle.reply)
    for seq in range(3):
        held.add([_delivery(seq)], now=0)
    [given] = held.take(1)
    still_held = held.items[0][1]
    ok, refused = held.acked([still_held, given, _delivery(99)])
    assert ok == [given] and refused == 2
    assert held.acked([given]) == ([], 1)  # acked already
    assert len(held) == 2  # the held ones stay held


def test_nats_held_longer_than_the_hold_time_is_not_handed_out() -> None:
    held = Held(hold_s=5, key=lambda d: d.handle.reply)
    held.add([_delivery(0)], now=0)
    held.add([_delivery(1)], now=4)
    assert not held.has_stale(5) and held.has_stale(5.1)
    assert [d.payload for d in held.stale(5.1)] == [b"m0"]
    assert [d.payload for d in held.take(5)] == [b"m1"]
    held.add([_delivery(2)], now=6)
    assert [d.payload for d in held.drop()] == [b"m2"] and len(held) == 0


def test_nats_credit_asks_once_half_empty_and_counts_what_requests_still_bring() -> None:
    c = nats_receiver.Credit()
    assert c.wanted(held=0, capacity=256) == 256
    c.asked("r1", 256, deadline=10)
    assert c.wanted(held=0, capacity=256) == 0  # 256 due
    for _ in range(100):
        c.arrived()
    assert c.due == 156 and c.wanted(held=100, capacity=256) == 0
    c.ended("r1", pending=156)  # expired, 156 never came
    assert c.due == 0 and c.wanted(held=100, capacity=256) == 156
    c.asked("r2", 156, deadline=20)
    c.ended("r2", pending=None)  # no count said: at most what live requests asked for
    assert c.due == 0 and not c.live
    assert c.wanted(held=0, capacity=1) == 1  # prefetch 1 asks for one at a time
    c.asked("r3", 1, deadline=30)
    assert c.wanted(held=0, capacity=1) == 0


def test_nats_credit_gives_up_on_requests_whose_end_it_never_hears_of() -> None:
    c = nats_receiver.Credit()
    c.asked("r1", 100, deadline=10)
    c.asked("r2", 50, deadline=20)
    c.ended("r3", pending=7)  # a request given up on before: ignored
    assert c.due == 150
    c.expire(now=15)  # r1 gone without a word: at most r2's 50 still come
    assert list(c.live) == ["r2"] and c.due == 50
    for _ in range(50):
        c.arrived()
    assert c.due == 0 and not c.live  # nothing due: every request is satisfied


class _FakeNats:
    """nats-py's client as the receiver uses it; the server answers at once: a pull request
    gets what is stored (up to its batch), an ack with a reply subject its confirmation
    ``confirm_after_s`` later."""

    def __init__(self, stored: list[Any], confirm_after_s: float = 0.0):
        self.stored = deque(stored)
        self.confirm_after_s = confirm_after_s
        self.events: list[tuple[Any, ...]] = []  # what the receiver sent, in order
        self.callbacks: dict[str, Any] = {}  # subscribed prefix -> callback
        self.stats = {"reconnects": 0}
        self.inboxes = 0
        self.status: dict[str, str] | None = None  # a pull request's answer once stored is out

    def new_inbox(self) -> str:
        self.inboxes += 1
        return f"_INBOX.{self.inboxes}"

    def jetstream(self, timeout: float) -> Any:
        return SimpleNamespace()

    async def subscribe(self, subject: str, cb: Any = None) -> Any:
        prefix = subject.removesuffix(".*")
        self.callbacks[prefix] = cb

        async def unsubscribe() -> None:
            self.events.append(("UNSUB", prefix))
            del self.callbacks[prefix]

        return SimpleNamespace(unsubscribe=unsubscribe)

    def _callback(self, reply: str) -> Any:
        return self.callbacks.get(reply.rpartition(".")[0])

    async def publish(self, subject: str, payload: bytes = b"", reply: str = "") -> None:
        self.events.append((subject, payload, reply))
        if subject.startswith("$JS.API.CONSUMER.MSG.NEXT."):
            cb = self._callback(reply)
            for _ in range(min(json.loads(payload)["batch"], len(self.stored))):
                await cb(self.stored.popleft())
            if self.status is not None:
                await cb(SimpleNamespace(subject=reply, data=b"", headers=self.status, reply=""))
        elif payload == b"+ACK" and reply:
            cb = self._callback(reply)
            loop = asyncio.get_running_loop()
            confirmation = SimpleNamespace(subject=reply, data=b"", headers=None)
            loop.call_later(self.confirm_after_s, lambda: loop.create_task(cb(confirmation)))

    async def flush(self, timeout: float = 0) -> None:
        self.events.append(("FLUSH",))

    async def close(self) -> None:
        self.events.append(("CLOSE",))


def _nats_receiver(
    monkeypatch: pytest.MonkeyPatch, stored: list[Any], **settings: Any
) -> tuple[Any, _FakeNats]:
    fake = _FakeNats(stored, settings.pop("confirm_after_s", 0.0))

    async def connect(**_kw: Any) -> _FakeNats:
        return fake

    monkeypatch.setattr(nats_driver.nats, "connect", connect)
    endpoints = Endpoints("nats", (NodeEndpoint(0, "127.0.0.1", 9),))
    driver = nats_driver.NatsDriver(nats_driver.Settings(**settings), endpoints, "q")
    return driver.receiver(), fake


def _pulls(fake: _FakeNats) -> list[int]:
    return [json.loads(e[1])["batch"] for e in fake.events if str(e[0]).startswith("$JS.API.")]


def test_nats_receive_hands_out_from_the_buffer_and_asks_again_once_half_empty(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    r, fake = _nats_receiver(monkeypatch, [_msg(i, 1 + (i == 2)) for i in range(20)], prefetch=8)
    got = r.receive(3, 1)
    assert [d.payload for d in got] == [b"m0", b"m1", b"m2"]
    assert [d.redelivered for d in got] == [False, False, True]
    assert _pulls(fake) == [8] and len(r.held) == 5
    sent = len(fake.events)
    assert len(r.receive(1, 1)) == 1  # 5 held: more than half, nothing sent
    assert len(fake.events) == sent and len(r.held) == 4
    assert [d.payload for d in r.receive(1, 1)] == [b"m4"]  # 4 held: ask for 4 more
    assert _pulls(fake) == [8, 4] and len(r.held) == 7
    # a batch larger than prefetch: asks for the rest of the batch, hands out what came
    assert len(r.receive(50, 1)) == 7 + 8
    assert _pulls(fake) == [8, 4, 43]
    r.close()


def test_nats_ack_sends_each_ack_in_order_and_refuses_held_messages(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    r, fake = _nats_receiver(monkeypatch, [_msg(i) for i in range(6)], prefetch=6)
    got = r.receive(2, 1)
    held = r.held.items[0][1]
    with pytest.raises(DriverError, match="1 of 3 deliveries"):
        r.ack([got[1], held, got[0]])
    acks = [(e[0], e[1]) for e in fake.events if e[1] == b"+ACK"]
    assert acks == [(got[1].handle.reply, b"+ACK"), (got[0].handle.reply, b"+ACK")]
    assert all(e[2].startswith(r.ack_prefix + ".") for e in fake.events if e[1] == b"+ACK")
    with pytest.raises(DriverError, match="acked already"):
        r.ack(got[:1])
    r.close()


def test_nats_close_naks_what_it_held_and_waits_for_every_ack_confirmation(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    r, fake = _nats_receiver(
        monkeypatch, [_msg(i) for i in range(5)], prefetch=5, confirm_after_s=0.05
    )
    got = r.receive(2, 1)
    r.ack(got)
    assert len(r.unconfirmed) == 2  # ack returned without waiting for the server
    held = [d.handle.reply for _, d in r.held.items]
    r.close()
    assert not r.unconfirmed and r.overdue == 0
    last_ack = max(i for i, e in enumerate(fake.events) if e[1:2] == (b"+ACK",))
    after_acks = fake.events[last_ack + 1 :]
    assert after_acks[0] == ("UNSUB", r.pull_prefix)
    assert [(e[0], e[1]) for e in after_acks[1:4]] == [(reply, b"-NAK") for reply in held]
    assert after_acks[4:] == [("FLUSH",), ("CLOSE",)]


def test_nats_without_ack_sync_acks_ask_for_no_confirmation(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    r, fake = _nats_receiver(monkeypatch, [_msg(i) for i in range(3)], prefetch=3, ack_sync=False)
    r.ack(r.receive(3, 1))
    assert [e[2] for e in fake.events if e[1] == b"+ACK"] == ["", "", ""]
    assert not r.unconfirmed
    r.close()


def test_nats_stale_held_messages_are_nakked_instead_of_handed_out(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    r, fake = _nats_receiver(monkeypatch, [_msg(i) for i in range(4)], prefetch=4)
    r.receive(1, 1)
    r.held.items[0] = (r.held.items[0][0] - 3600, r.held.items[0][1])  # held an hour
    got = r.receive(3, 1)
    assert [d.payload for d in got] == [b"m2", b"m3"]
    assert [e[0] for e in fake.events if e[1] == b"-NAK"] == [_msg(1).reply]
    r.close()


def test_nats_a_request_that_expired_is_asked_again_and_an_error_fails_the_receive(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    r, fake = _nats_receiver(monkeypatch, [_msg(0)], prefetch=4)
    fake.status = {"Status": "408", "Description": "Request Timeout", "Nats-Pending-Messages": "3"}
    assert len(r.receive(1, 1)) == 1  # 1 came, the request expired lacking 3
    assert r.credit.due == 0 and not r.credit.live
    fake.status = {"Status": "503", "Description": ""}
    with pytest.raises(DriverError, match="503 no responders"):
        r.receive(1, 1)
    assert _pulls(fake) == [4, 4]
    r.close()


def test_nats_prefetch_0_is_the_fetch_per_receive_path(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = _FakeNats([])

    async def connect(**_kw: Any) -> _FakeNats:
        return fake

    async def pull_subscribe_bind(**_kw: Any) -> Any:
        return SimpleNamespace()

    fake.jetstream = lambda timeout: SimpleNamespace(  # type: ignore[method-assign]
        pull_subscribe_bind=pull_subscribe_bind
    )
    monkeypatch.setattr(nats_driver.nats, "connect", connect)
    endpoints = Endpoints("nats", (NodeEndpoint(0, "127.0.0.1", 9),))
    driver = nats_driver.NatsDriver(nats_driver.Settings(prefetch=0), endpoints, "q")
    r = driver.receiver()
    assert isinstance(r, nats_receiver.NatsFetchReceiver)
    r.close()


# --- Redis --------------------------------------------------------------------------


def _entry(seq: int) -> Delivery:
    return Delivery(f"e{seq}".encode(), (b"q", f"{seq}-0".encode()), False)


def test_redis_held_hands_out_at_most_max_and_accepts_one_ack_per_hand_out() -> None:
    held = Held(hold_s=10)
    held.add([_entry(i) for i in range(4)], now=0)
    got = held.take(3)
    assert [d.payload for d in got] == [b"e0", b"e1", b"e2"]
    assert held.acked([held.items[0][1]]) == ([], 1)  # still held: cannot be acked
    ok, refused = held.acked([got[2], got[0]])
    assert ok == [got[2], got[0]] and refused == 0
    assert held.acked([got[0]]) == ([], 1)  # acked already
    held.add([_entry(1)], now=0)  # read again (own pending entries after a failure)
    again = held.take(2)
    assert [d.handle for d in again] == [(b"q", b"3-0"), (b"q", b"1-0")]
    assert held.acked([got[1], again[1]]) == ([got[1], again[1]], 0)  # one ack per hand-out
    held.add([_entry(5)], now=0)
    assert not held.has_stale(10) and [d.payload for d in held.stale(10.5)] == [b"e5"]


class _FakeStreams:
    """What a Redis receiver's connection is asked, answered from one in-memory stream."""

    def __init__(self, n: int):
        self.new = deque((f"{i}-0".encode(), f"e{i}".encode()) for i in range(n))
        self.calls: list[tuple[Any, ...]] = []
        self.sent: list[list[tuple[Any, ...]]] = []
        self.settled = 0

    def call(self, *args: Any, **_options: Any) -> Any:
        self.calls.append(args)
        if args[0] == "XAUTOCLAIM":
            return [b"0-0", [], []]
        count = args[args.index("COUNT") + 1]
        streams = args.index("STREAMS")
        key, start = args[streams + 1], args[streams + 2]
        if start != b">":
            return [[key, []]]  # no own pending entries
        got = [self.new.popleft() for _ in range(min(count, len(self.new)))]
        return [[key, [(i, {redis_driver.FIELD: p}) for i, p in got]]] if got else []

    def send(self, commands: list[tuple[Any, ...]]) -> None:
        self.sent.append(list(commands))

    def settle(self) -> None:
        self.settled += 1

    def reset(self) -> None:
        pass

    def reads(self) -> list[tuple[int, bool]]:
        """(COUNT, BLOCK given) of each read of new entries."""
        return [
            (c[c.index("COUNT") + 1], "BLOCK" in c)
            for c in self.calls
            if c[0] == "XREADGROUP" and c[-1] == b">"
        ]


def _redis_receiver(n: int, **settings: Any) -> tuple[Any, _FakeStreams]:
    endpoints = Endpoints("redis", (NodeEndpoint(0, "127.0.0.1", 9),))
    driver = redis_driver.RedisDriver(redis_driver.Settings(**settings), endpoints, "q")
    r: Any = driver.receiver()  # redis-py connects lazily: nothing is reached here
    fake = _FakeStreams(n)
    r.io = fake
    return r, fake


def test_redis_receive_reads_ahead_and_hands_out_from_the_buffer() -> None:
    r, fake = _redis_receiver(20, prefetch=8)
    assert [d.payload for d in r.receive(3, 1)] == [b"e0", b"e1", b"e2"]
    assert fake.reads() == [(8, True)]  # empty buffer: one read of 8, waiting for them
    calls = len(fake.calls)
    assert len(r.receive(1, 1)) == 1  # 5 held: more than half, nothing read
    assert len(fake.calls) == calls and len(r.held) == 4
    assert [d.payload for d in r.receive(1, 1)] == [b"e4"]  # 4 held: read 4 more at once
    assert fake.reads() == [(8, True), (4, False)] and len(r.held) == 7
    # a batch larger than prefetch: reads the rest of the batch, hands out what came
    assert len(r.receive(50, 1)) == 7 + 8
    assert fake.reads() == [(8, True), (4, False), (43, False)]
    r.close()


def test_redis_acks_are_sent_at_once_in_order_and_close_reads_their_replies() -> None:
    r, fake = _redis_receiver(6, prefetch=6)
    got = r.receive(3, 1)
    held = r.held.items[0][1]
    with pytest.raises(DriverError, match="1 of 3 deliveries"):
        r.ack([got[2], held, got[0]])
    assert fake.sent == [
        [("XACK", b"q", "workers", b"2-0", b"0-0"), ("XDEL", b"q", b"2-0", b"0-0")]
    ]
    r.close()
    assert fake.settled == 1


def test_redis_prefetch_0_reads_at_most_the_batch_and_waits_for_its_acks() -> None:
    endpoints = Endpoints("redis", (NodeEndpoint(0, "127.0.0.1", 9),))
    driver = redis_driver.RedisDriver(redis_driver.Settings(prefetch=0), endpoints, "q")
    r: Any = driver.receiver()
    assert isinstance(r.io, redis_wire.Calls)  # every command its own round trip
    fake = _FakeStreams(10)
    r.io = fake
    assert len(r.receive(3, 1)) == 3 and len(r.receive(3, 1)) == 3
    assert fake.reads() == [(3, True), (3, True)] and len(r.held) == 0
    r.close()


class _FakeConnection:
    """A redis-py connection: commands written, replies read in order (an Exception in the
    script is raised as the reply)."""

    def __init__(self, replies: list[Any]):
        self.replies = deque(replies)
        self.written: list[list[tuple[Any, ...]]] = []
        self.disconnected = 0
        self.taken = 0  # times the pool handed it out

    def pack_commands(self, commands: Any) -> list[tuple[Any, ...]]:
        return list(commands)

    def send_packed_command(self, packed: list[tuple[Any, ...]]) -> None:
        self.written.append(packed)

    def disconnect(self) -> None:
        self.disconnected += 1


def _wire(replies: list[Any]) -> tuple[Any, _FakeConnection]:
    conn = _FakeConnection(replies)

    def parse_response(c: _FakeConnection, name: str, **_options: Any) -> Any:
        reply = c.replies.popleft()
        if isinstance(reply, BaseException):
            raise reply
        return (name, reply)

    def get_connection() -> _FakeConnection:
        conn.taken += 1  # the pool connects it (to the primary the sentinels name)
        return conn

    r: Any = SimpleNamespace(
        connection_pool=SimpleNamespace(get_connection=get_connection, release=lambda c: None),
        parse_response=parse_response,
    )
    return redis_wire.Wire(r), conn


def test_redis_wire_writes_at_once_and_reads_the_replies_in_order(
    caplog: pytest.LogCaptureFixture,
) -> None:
    w, conn = _wire([1, redis_driver.redis.ResponseError("NOGROUP"), 1, "entries"])
    w.send([("XACK", b"q", "g", b"1-0"), ("XDEL", b"q", b"1-0")])
    w.send([("XACK", b"q", "g", b"2-0")])
    assert len(conn.written) == 2 and len(conn.replies) == 4  # nothing read yet
    with caplog.at_level(logging.WARNING):
        assert w.call("XREADGROUP", "GROUP", "g", "c", "STREAMS", b"q", b">") == (
            "XREADGROUP",
            "entries",
        )
    assert "XDEL failed: NOGROUP" in caplog.text  # an ack's error reply is logged
    assert not w.unread and not conn.replies


def test_redis_wire_drops_the_connection_and_what_was_unread_after_a_failure() -> None:
    w, conn = _wire([redis_driver.redis.ConnectionError("The previous master is now a slave")])
    w.send([("XACK", b"q", "g", b"1-0")])
    with pytest.raises(redis_driver.redis.ConnectionError):
        w.settle()
    assert conn.disconnected == 1 and not w.unread
    w.send([("XACK", b"q", "g", b"2-0")])  # from the pool again: connected anew
    assert conn.taken == 2
