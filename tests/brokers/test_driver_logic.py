"""Pure logic of the drivers (no server): offsets, confirms, delivery reports, settings."""

from __future__ import annotations

import asyncio
import importlib
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import nats.errors
import nats.js.errors
import pytest
from nats.js import api
from pika import spec as amqp

from mqlab import envelope, typed
from mqlab.brokers import base
from mqlab.brokers.base import Endpoints, NodeEndpoint
from mqlab.brokers.kafka import driver as kafka
from mqlab.brokers.kafka import offsets
from mqlab.brokers.nats import driver as nats_driver
from mqlab.brokers.rabbitmq import driver as rabbitmq
from mqlab.brokers.rabbitmq.publishing import PublishFrames
from mqlab.brokers.redis import streams
from mqlab.brokers.sqs import driver as sqs
from mqlab.errors import DriverError, ScenarioError


def test_kafka_commits_only_the_contiguous_acked_prefix() -> None:
    t = offsets.OffsetTracker()
    for off in (5, 6, 7, 9):  # 8 was never handed to us (a gap in offsets)
        t.delivered(0, off)
    t.delivered(1, 100)
    # the delivered marks go out at once, at the offsets the consumer started from
    assert t.to_commit() == {0: (5, 9), 1: (100, 100)}
    t.ack(0, 6)
    assert t.to_commit() == {}  # 5 still out
    t.ack(0, 5)
    assert t.to_commit() == {0: (7, 9)}
    t.ack(0, 9)
    assert t.to_commit() == {}  # 7 still out
    t.ack(0, 7)
    t.ack(1, 100)
    # 8 was never handed out: the commit stops before it (it comes again; never skipped)
    assert t.to_commit() == {0: (8, 9), 1: (101, 100)}
    assert t.to_commit() == {}  # nothing new


def test_kafka_acks_in_order_and_out_of_order_commit_alike() -> None:
    """In-order acks take a short path; mixed with out-of-order ones the commit is the same."""
    commits = []
    for order in ([0, 1, 2, 3, 4, 5], [1, 0, 2, 4, 3, 5], [5, 4, 3, 2, 1, 0]):
        t = offsets.OffsetTracker()
        t.start(0, 10)
        assert [t.delivered(0, 10 + i) for i in range(6)] == [False] * 6
        seen = []
        for i in order:
            t.ack(0, 10 + i)
            seen.append(t.to_commit().get(0, (None,))[0])
        commits.append(seen[-1])
        assert not t.outstanding[0] and not t.acked[0]
    assert commits == [16, 16, 16]


def test_kafka_never_commits_over_a_message_dropped_before_delivery() -> None:
    # the group had committed 40; offset 40 was fetched but dropped (e.g. a revoke purge)
    t = offsets.OffsetTracker()
    t.start(0, 40)
    for off in (41, 42):
        t.delivered(0, off)
        t.ack(0, off)
    assert t.to_commit() == {0: (40, 42)}  # the mark goes out; the offset stays at 40
    t.start(1, -1001)  # no committed offset: the first delivered one is the start
    t.delivered(1, 7)
    t.ack(1, 7)
    assert t.to_commit() == {1: (8, 7)}


def test_kafka_acks_of_revoked_partitions_are_ignored() -> None:
    t = offsets.OffsetTracker()
    t.delivered(3, 1)
    t.to_commit()
    t.forget([3])
    t.ack(3, 1)
    assert t.to_commit() == {}


def test_kafka_flags_offsets_at_or_below_the_delivered_mark_as_redelivered() -> None:
    t = offsets.OffsetTracker()
    t.inherit(0, offsets.parse_mark("delivered=11"))  # committed by the partition's last owner
    t.inherit(1, offsets.parse_mark(None))  # tansu: no metadata comes back
    assert [t.delivered(0, off) for off in (10, 11, 12)] == [True, True, False]
    assert [t.delivered(1, off) for off in (0, 1)] == [False, False]
    assert t.to_commit() == {0: (10, 12), 1: (0, 1)}
    # the partition goes to another consumer and comes back: its own marks still count
    t.forget([0, 1])
    t.inherit(1, offsets.parse_mark(None))
    assert [t.delivered(1, off) for off in (0, 1, 2)] == [True, True, False]
    # a mark committed meanwhile by the other owner counts too (the higher of the two)
    t.inherit(0, offsets.parse_mark(offsets.mark_metadata(20)))
    assert [t.delivered(0, off) for off in (13, 20, 21)] == [True, True, False]


def test_kafka_runs_taken_in_bulk_commit_to_their_end_and_never_over_a_hole() -> None:
    """Receivers in lanes: a fetched run recorded and acked at once moves the commit to
    its end and the mark to its last offset; a run that left offsets out stops the
    partition's commits at the first one for as long as this consumer owns it."""
    t = offsets.OffsetTracker()
    t.start(0, 10)
    t.took_run(0, 20, 19)
    assert t.to_commit() == {0: (20, 19)} and t.expected[0] == 20
    t.took_run(0, 30, 29, hole=23)  # 23 not fetched (after GAP_RETRIES tries)
    assert t.to_commit() == {0: (23, 29)} and t.expected[0] == 30
    t.took_run(0, 40, 39)
    assert t.to_commit() == {0: (23, 39)}  # stuck at the hole; the mark goes on
    t.took_run(0, 41, -1)  # nothing delivered in it (a control batch): the mark stays
    assert t.to_commit() == {0: (23, 39)}
    t.forget([0])  # revoked: the next owner reads from 23 on (at least once)
    t.start(0, 23)
    t.took_run(0, 50, 49)
    assert t.to_commit() == {0: (50, 49)}
    t.delivered(1, 5)  # handed out one by one: no bulk run behind it
    with pytest.raises(ValueError, match="one by one"):
        t.took_run(1, 9, 8)


def test_kafka_commit_metadata_round_trip() -> None:
    assert offsets.parse_mark(offsets.mark_metadata(42)) == 42
    for foreign in (None, "", "delivered=", "delivered=x", "something else"):
        assert offsets.parse_mark(foreign) == -1


class _FakeProducer:
    """Keeps produced messages' delivery callbacks; ``flush`` serves them as the test says."""

    def __init__(self, config: dict[str, Any]) -> None:
        self.config = config
        self.queued: list[tuple[bytes, Callable[[Any, Any], None]]] = []
        self.stalled = True  # flush serves nothing: the broker does not answer
        self.failing: set[bytes] = set()  # these messages' reports carry an error

    def produce(self, _topic: str, value: bytes, on_delivery: Callable[[Any, Any], None]) -> None:
        self.queued.append((value, on_delivery))

    def poll(self, timeout: float = 0) -> int:
        """As librdkafka's: waits up to ``timeout`` when it has nothing to serve (a poll
        thread calling it spins otherwise)."""
        if self.stalled or not self.queued:
            time.sleep(timeout)
        return self.flush(0)

    def flush(self, _timeout: float = 0) -> int:
        if self.stalled:
            return len(self.queued)
        served, self.queued = self.queued, []
        for value, report in served:
            report("broker down" if value in self.failing else None, None)
        return 0

    def __len__(self) -> int:
        return len(self.queued)


KafkaSenders = Callable[..., tuple[kafka.KafkaSender, _FakeProducer]]


@pytest.fixture
def kafka_sender(monkeypatch: pytest.MonkeyPatch) -> Iterator[KafkaSenders]:
    """Makes Kafka senders on a fake producer; closes them at the end, which must stop
    every poll thread they started (left running, one spins in this process for the rest
    of the session)."""
    monkeypatch.setattr(kafka, "Producer", _FakeProducer)
    made: list[kafka.KafkaSender] = []

    def make(**settings: Any) -> tuple[kafka.KafkaSender, _FakeProducer]:
        endpoints = Endpoints("kafka", (NodeEndpoint(0, "127.0.0.1", 9),))
        driver = kafka.KafkaDriver(kafka.Settings(send_timeout_s=0.2, **settings), endpoints, "q")
        sender = kafka.KafkaSender(driver)
        made.append(sender)
        assert isinstance(sender.shared.p, _FakeProducer)
        return sender, sender.shared.p

    yield make
    pollers = [s.shared.poller for s in made if s.shared.poller is not None]
    for s in made:
        s.close()
    assert pollers and not any(t.is_alive() for t in pollers)


def test_kafka_compression_reaches_the_producer_config(kafka_sender: KafkaSenders) -> None:
    _sender, producer = kafka_sender()
    assert producer.config["compression.type"] == "none"  # the default: uncompressed
    for codec in ("gzip", "snappy", "lz4", "zstd"):
        _sender, producer = kafka_sender(compression=codec)
        assert producer.config["compression.type"] == codec


def test_kafka_compression_is_one_of_librdkafkas_codecs() -> None:
    built = typed.build(kafka.Settings, {"compression": "snappy"}, Path("p.toml"), "settings")
    assert built.compression == "snappy"
    assert kafka.Settings().compression == "none"
    with pytest.raises(ScenarioError, match="settings.compression.*one of: none, gzip"):
        typed.build(kafka.Settings, {"compression": "brotli"}, Path("p.toml"), "settings")


def test_kafka_late_delivery_errors_fail_only_their_own_batch(
    kafka_sender: KafkaSenders,
) -> None:
    sender, producer = kafka_sender()
    with pytest.raises(DriverError, match="unconfirmed"):
        sender.send([b"a1", b"a2"])  # no reports within the timeout
    # the broker answers again: batch 1's reports come late, with errors, during batch 2
    producer.stalled, producer.failing = False, {b"a1", b"a2"}
    sender.send([b"b1", b"b2"])  # its own reports are fine: it succeeds
    producer.failing = {b"c2"}
    with pytest.raises(DriverError, match="broker down"):
        sender.send([b"c1", b"c2"])  # an error of its own fails it


def test_kafka_late_success_reports_do_not_confirm_the_next_batch(
    kafka_sender: KafkaSenders, monkeypatch: pytest.MonkeyPatch
) -> None:
    sender, producer = kafka_sender()
    with pytest.raises(DriverError):
        sender.send([b"a1", b"a2"])
    late, producer.queued = producer.queued, []

    def serve_late(_timeout: float = 0) -> int:
        """Batch 1's successes come while batch 2 waits; batch 2's never do."""
        for _value, report in late:
            report(None, None)
        late.clear()
        return len(producer.queued)

    monkeypatch.setattr(producer, "poll", serve_late)
    with pytest.raises(DriverError, match="2 messages unconfirmed"):
        sender.send([b"b1", b"b2"])
    assert not late  # they were served during batch 2's wait, and counted for nothing


def _frame(cls: type, tag: int, multiple: bool) -> SimpleNamespace:
    return SimpleNamespace(method=cls(delivery_tag=tag, multiple=multiple))


def test_rabbitmq_confirms_count_single_and_cumulative_acks() -> None:
    c = rabbitmq._Confirms()
    c.start_batch()
    for _ in range(5):
        c.published()
    c.on_frame(_frame(amqp.Basic.Ack, 2, False))
    assert not c.all_confirmed()
    c.on_frame(_frame(amqp.Basic.Ack, 3, True))  # 1..3
    c.on_frame(_frame(amqp.Basic.Ack, 5, False))
    assert not c.all_confirmed()
    c.on_frame(_frame(amqp.Basic.Nack, 4, False))
    assert c.all_confirmed() and c.nacked == 1


class _FakeConnection:
    """Plays the broker's confirm frames into the sender when it waits for them."""

    def __init__(self) -> None:
        self.script: list[SimpleNamespace] = []  # frames the next wait delivers
        self.sender: Any = None
        self.is_open = True
        self.written: list[bytes] = []  # what the sender wrote, a write a batch
        self._impl = SimpleNamespace(
            bytes_sent=0, frames_sent=0, _transport=None, _adapter_emit_data=self.written.append
        )

    def process_data_events(self, time_limit: float = 0) -> None:
        frames, self.script = self.script, []
        for f in frames:
            self.sender.confirms.on_frame(f)  # as the channel's confirm callback does
        if not frames:
            time.sleep(min(time_limit, 0.01))

    def add_callback_threadsafe(self, _callback: Callable[[], None]) -> None:
        pass


def _fake_client(conn: _FakeConnection, closed: list[Any]) -> Any:
    client: Any = SimpleNamespace(conn=conn, ch=SimpleNamespace(is_open=True, channel_number=1))
    client.close = lambda: closed.append(client)
    return client


def _rabbitmq_sender() -> tuple[rabbitmq.RabbitmqSender, _FakeConnection, list[Any]]:
    conn = _FakeConnection()
    closed: list[Any] = []
    sender = rabbitmq.RabbitmqSender.__new__(rabbitmq.RabbitmqSender)  # no broker
    sender.c = _fake_client(conn, closed)
    sender.queue, sender.timeout = "q", 0.2
    sender.frames = PublishFrames(1, "q", 4088)
    sender.confirms = rabbitmq._Confirms()
    conn.sender = sender

    def reconnect() -> Any:  # what _connect does: a new channel, confirm tags from 1
        sender.c, sender.confirms = _fake_client(conn, closed), rabbitmq._Confirms()
        return sender.c

    sender._connect = reconnect  # type: ignore[method-assign]
    return sender, conn, closed


def test_rabbitmq_a_nack_fails_only_its_own_batch_and_keeps_the_channel() -> None:
    sender, conn, closed = _rabbitmq_sender()
    first = sender.c
    # batch 1 (tags 1, 2): a cumulative nack up to 1, an ack of 2
    conn.script = [_frame(amqp.Basic.Nack, 1, True), _frame(amqp.Basic.Ack, 2, False)]
    with pytest.raises(DriverError, match="nacked 1 messages"):
        sender.send([b"a1", b"a2"])
    # batch 2 (tags 3, 4) on the same channel: acked
    conn.script = [_frame(amqp.Basic.Ack, 4, True)]
    sender.send([b"b1", b"b2"])
    assert sender.c is first and closed == []
    # each batch written at once, its publishes in order
    assert conn.written == [
        sender.frames.batch([b"a1", b"a2"]),
        sender.frames.batch([b"b1", b"b2"]),
    ]


def test_rabbitmq_a_confirm_timeout_drops_the_channel_and_the_next_send_reconnects() -> None:
    sender, conn, closed = _rabbitmq_sender()
    first = sender.c
    with pytest.raises(DriverError, match="no publisher confirm"):
        sender.send([b"a1", b"a2", b"a3"])  # tags 1-3: no confirm in time
    assert closed == [first] and sender.c is None
    # the next send opens a new channel, whose confirm tags start at 1 again
    conn.script = [_frame(amqp.Basic.Ack, 2, True)]
    sender.send([b"b1", b"b2"])
    assert sender.c is not first and closed == [first]


def test_redis_read_plan_never_exceeds_max_messages() -> None:
    keys = streams.key_names("q", 100)
    assert keys[0] == b"q:0" and len(keys) == 100
    assert streams.key_names("q", 1) == [b"q"]
    for n_keys in (1, 3, 100):
        for max_messages in (1, 2, 7, 10, 250):
            chosen, count = streams.read_plan(keys[:n_keys], 5, max_messages)
            assert 1 <= len(chosen) <= n_keys and count >= 1
            assert len(chosen) * count <= max_messages
    chosen, _ = streams.read_plan(keys[:3], 2, 2)
    assert chosen == [b"q:2", b"q:0"]  # rotates from the start offset


def test_sqs_bodies_are_text_and_batches_at_most_ten() -> None:
    payload = bytes(range(256))
    body = sqs.encode(payload)
    assert body.isascii() and sqs.decode(body) == payload
    assert [len(c) for c in sqs.chunks(list(range(23)))] == [10, 10, 3]


def test_sqs_receives_long_poll_at_least_a_second() -> None:
    assert sqs.wait_time_s(0.5, 20) == 1  # not int(0.5) == 0: a short poll
    assert sqs.wait_time_s(0.01, 20) == 1
    assert sqs.wait_time_s(2.2, 20) == 3
    assert sqs.wait_time_s(60, 20) == 20  # SQS's maximum
    assert sqs.wait_time_s(5, 0) == 0  # the profile turned long polling off
    assert sqs.wait_time_s(0, 20) == 0  # a receive that must not wait


def test_identified_payloads_keep_the_whole_mqlab_header() -> None:
    assert base.IDENTIFY_PREFIX_BYTES >= envelope.HEADER_BYTES


@pytest.mark.parametrize(
    ("module", "settings", "expected_s"),
    [
        ("nats", {"ack_wait_s": 7.0}, 7.0),
        ("redis", {"visibility_timeout_s": 4.0, "reclaim_interval_s": 0.5}, 4.5),
        ("postgres", {"visibility_timeout_s": 3.0}, 3.0),
        ("mongodb", {"visibility_timeout_s": 5.0}, 5.0),
        ("sqs", {"visibility_timeout_s": 9}, 9.0),
        ("kafka", {"session_timeout_ms": 6000, "commit_interval_s": 2.0}, 8.0),
        ("rabbitmq", {}, 0.0),
    ],
)
def test_redelivery_timeout_follows_the_settings(
    module: str, settings: dict[str, Any], expected_s: float
) -> None:
    mod = importlib.import_module(f"mqlab.brokers.{module}.driver")
    endpoints = Endpoints(module, (NodeEndpoint(0, "127.0.0.1", 9),))
    driver = mod.DRIVER(mod.DRIVER.Settings(**settings), endpoints, "q")
    assert driver.redelivery_timeout_s == pytest.approx(expected_s)


class _FlakyJetStream:
    """publish_async whose first ``refusals`` publishes of a payload get no responders."""

    def __init__(self, refusals: int):
        self.refusals = refusals
        self.tries: dict[bytes, int] = {}
        self.stored: list[bytes] = []

    async def publish_async(self, subject: str, payload: bytes) -> Any:
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        n = self.tries[payload] = self.tries.get(payload, 0) + 1
        if n <= self.refusals:
            fut.set_exception(nats.js.errors.NoStreamResponseError)
        else:
            self.stored.append(payload)
            fut.set_result(api.PubAck(stream="S", seq=len(self.stored)))
        return fut


def _nats_sender(js: _FlakyJetStream, timeout_s: float) -> Any:
    s = object.__new__(nats_driver.NatsSender)
    loop = asyncio.new_event_loop()
    s.c = SimpleNamespace(js=js, run=loop.run_until_complete, loop=loop)  # type: ignore[assignment]
    s.subject, s.timeout, s.republished = "q", timeout_s, 0
    return s


def test_nats_publishes_again_what_no_server_took() -> None:
    js = _FlakyJetStream(refusals=2)
    s = _nats_sender(js, timeout_s=5.0)
    s.send([b"a", b"b", b"c"])
    assert sorted(js.stored) == [b"a", b"b", b"c"]  # each stored once, after two refusals
    assert js.tries == {b"a": 3, b"b": 3, b"c": 3}
    assert s.republished == 6
    s.c.loop.close()


def test_nats_gives_up_on_no_responders_after_the_publish_timeout() -> None:
    js = _FlakyJetStream(refusals=1_000)
    s = _nats_sender(js, timeout_s=0.6)
    with pytest.raises(DriverError, match=r"no JetStream server took 2 of 2 .*no responders"):
        s.send([b"a", b"b"])
    assert js.stored == [] and 2 <= js.tries[b"a"] <= 4  # 0.25 s apart within 0.6 s
    s.c.loop.close()


def test_nats_asks_again_for_the_stream_leader_while_no_one_answers(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A stream info request during a leader election gets no answer: asked again, and a
    one-line DriverError (which a run's fault step retries) past the bound."""
    endpoints = Endpoints("nats", (NodeEndpoint(0, "127.0.0.1", 9),))
    driver = nats_driver.NatsDriver(nats_driver.Settings(), endpoints, "q")
    calls: list[int] = []

    def admin(go: Any, unanswered: int) -> Any:
        calls.append(1)
        if len(calls) <= unanswered:
            raise nats.errors.TimeoutError
        return {"leader": "n1", "replicas": ["n0", "n2"], "messages": 0}

    monkeypatch.setattr(driver, "_admin", lambda go: admin(go, 2))
    assert driver.stream_replicas()["leader"] == "n1" and len(calls) == 3
    calls.clear()
    monkeypatch.setattr(nats_driver, "SETUP_WAIT_S", 0.0)
    monkeypatch.setattr(driver, "_admin", lambda go: admin(go, 10**6))
    with pytest.raises(
        DriverError, match=r"leader: JetStream did not answer within 0 s \(TimeoutError\)"
    ):
        driver.stream_replicas()
    assert len(calls) == 1  # past the deadline at once: not asked again
