"""``remaining()`` asks for the group's committed offsets again while its coordinator is
not ready (mqlab.brokers.kafka.driver._committed), with a fake consumer; the real
clusters' remaining() is in tests/brokers/test_contract.py."""

from __future__ import annotations

from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException, TopicPartition

from mqlab.brokers.kafka import driver


class FakeConsumer:
    """committed() raises each of ``errors`` in turn, then answers offset 7 per partition."""

    def __init__(self, errors: list[int]) -> None:
        self.errors = errors
        self.asked = 0

    def committed(self, parts: list[TopicPartition], timeout: float) -> list[TopicPartition]:
        self.asked += 1
        if self.errors:
            raise KafkaException(KafkaError(self.errors.pop(0)))
        return [TopicPartition(p.topic, p.partition, 7) for p in parts]


PARTS = [TopicPartition("t", 0), TopicPartition("t", 1)]


def test_a_coordinator_not_ready_is_asked_again_until_it_answers() -> None:
    c: Any = FakeConsumer([KafkaError.COORDINATOR_LOAD_IN_PROGRESS, KafkaError.NOT_COORDINATOR])
    got = driver._committed(c, PARTS)
    assert [(tp.partition, tp.offset) for tp in got] == [(0, 7), (1, 7)]
    assert c.asked == 3


def test_another_error_is_raised_at_once() -> None:
    c: Any = FakeConsumer([KafkaError.GROUP_AUTHORIZATION_FAILED])
    with pytest.raises(KafkaException) as e:
        driver._committed(c, PARTS)
    assert e.value.args[0].code() == KafkaError.GROUP_AUTHORIZATION_FAILED
    assert c.asked == 1


def test_a_coordinator_never_ready_is_raised_after_the_wait(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(driver, "COORDINATOR_WAIT_S", 0.6)
    c: Any = FakeConsumer([KafkaError.NOT_COORDINATOR] * 100)
    with pytest.raises(KafkaException) as e:
        driver._committed(c, PARTS)
    assert e.value.args[0].code() == KafkaError.NOT_COORDINATOR
    assert 2 <= c.asked <= 3  # 0.5 s apart
