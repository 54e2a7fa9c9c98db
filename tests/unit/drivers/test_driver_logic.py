"""Pure logic of the Redis, RabbitMQ, Kafka and SQS drivers (no server)."""

from __future__ import annotations

from types import SimpleNamespace

from pika import spec as amqp

from mqlab.drivers import kafka, rabbitmq, redis, sqs


def test_kafka_commits_only_the_contiguous_acked_prefix() -> None:
    t = kafka.OffsetTracker()
    for off in (5, 6, 7, 9):  # 8 was never handed to us (a gap in offsets)
        t.delivered(0, off)
    t.delivered(1, 100)
    t.ack(0, 6)
    assert t.to_commit() == {}  # 5 still out
    t.ack(0, 5)
    assert t.to_commit() == {0: 7}
    t.ack(0, 9)
    assert t.to_commit() == {}  # 7 still out
    t.ack(0, 7)
    t.ack(1, 100)
    assert t.to_commit() == {0: 10, 1: 101}
    assert t.to_commit() == {}  # nothing new


def test_kafka_acks_of_revoked_partitions_are_ignored() -> None:
    t = kafka.OffsetTracker()
    t.delivered(3, 1)
    t.forget([3])
    t.ack(3, 1)
    assert t.to_commit() == {}


def _frame(cls: type, tag: int, multiple: bool) -> SimpleNamespace:
    return SimpleNamespace(method=cls(delivery_tag=tag, multiple=multiple))


def test_rabbitmq_confirms_count_single_and_cumulative_acks() -> None:
    c = rabbitmq._Confirms()
    c.published = 5
    c.on_frame(_frame(amqp.Basic.Ack, 2, False))
    assert not c.all_confirmed()
    c.on_frame(_frame(amqp.Basic.Ack, 3, True))  # 1..3
    c.on_frame(_frame(amqp.Basic.Ack, 5, False))
    assert not c.all_confirmed()
    c.on_frame(_frame(amqp.Basic.Nack, 4, False))
    assert c.all_confirmed() and c.nacked == 1


def test_redis_read_plan_never_exceeds_max_messages() -> None:
    keys = redis.key_names("q", 100)
    assert keys[0] == b"q:0" and len(keys) == 100
    assert redis.key_names("q", 1) == [b"q"]
    for n_keys in (1, 3, 100):
        for max_messages in (1, 2, 7, 10, 250):
            chosen, count = redis.read_plan(keys[:n_keys], 5, max_messages)
            assert 1 <= len(chosen) <= n_keys and count >= 1
            assert len(chosen) * count <= max_messages
    chosen, _ = redis.read_plan(keys[:3], 2, 2)
    assert chosen == [b"q:2", b"q:0"]  # rotates from the start offset


def test_sqs_bodies_are_text_and_batches_at_most_ten() -> None:
    payload = bytes(range(256))
    body = sqs.encode(payload)
    assert body.isascii() and sqs.decode(body) == payload
    assert [len(c) for c in sqs.chunks(list(range(23)))] == [10, 10, 3]
