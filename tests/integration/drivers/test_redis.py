"""Redis only: remaining() when acked entries stay in the streams (``delete_on_ack=False``)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from mqlab.drivers.redis import RedisDriver
from mqlab.workload import envelope
from tests.integration.conftest import SharedLab
from tests.integration.drivers.conftest import driver_on
from tests.integration.drivers.test_contract import _messages

pytestmark = pytest.mark.integration


@pytest.fixture
def driver(shared_lab: SharedLab) -> Iterator[RedisDriver]:
    with driver_on(shared_lab, "redis-keep", "keep") as d:
        yield d


def test_remaining_counts_unread_entries_when_redis_cannot_tell_the_lag(
    driver: RedisDriver,
) -> None:
    s = driver.sender()
    for _ in driver.keys:  # one batch per key (the sender rotates over them)
        s.send(_messages(4))
    s.close()
    r = driver.connect()
    try:
        key = driver.keys[0]
        entries: Any = r.xrange(key, count=2)
        doomed = entries[1][0]  # not the first: a tombstone among the unread
        r.xdel(key, doomed)  # XINFO GROUPS then reports lag as nil
        groups = r.xinfo_groups(key)
        assert groups[0]["lag"] is None
    finally:
        r.close()
    left = 4 * len(driver.keys) - 1
    found = driver.remaining(identify=True)
    assert found.count == left and found.in_flight == 0
    assert found.payloads is not None and len(found.payloads) == left
    assert all(envelope.decode(p)[0] == 7 for p in found.payloads)
    assert driver.remaining().count == left
