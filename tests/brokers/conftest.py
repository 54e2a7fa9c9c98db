"""Fixtures for the driver contract suite: each broker's real local cluster, shared by the
session."""

from __future__ import annotations

import contextlib
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from mqlab.brokers import registry
from mqlab.brokers.base import Driver
from tests.brokers.targets import TARGETS, Target
from tests.conftest import SharedLab


@contextlib.contextmanager
def driver_on(shared_lab: SharedLab, target_name: str, prefix: str) -> Iterator[Any]:
    """A driver of ``TARGETS[target_name]`` on its shared cluster, with a fresh queue that is
    set up before and torn down after."""
    target = TARGETS[target_name]
    cluster = shared_lab.cluster(target.broker, target.contract.nodes)
    cls = registry.driver_class(target.broker)
    driver: Any = cls(target.settings(), cluster.endpoints(), f"{prefix}_{uuid.uuid4().hex[:10]}")
    driver.setup()
    try:
        yield driver
    finally:
        driver.teardown()
        driver.close()


@pytest.fixture(params=sorted(TARGETS), ids=sorted(TARGETS))
def contract(
    request: pytest.FixtureRequest, shared_lab: SharedLab
) -> Iterator[tuple[Driver, Target]]:
    target = TARGETS[request.param]
    cluster = shared_lab.cluster(target.broker, target.contract.nodes)
    cls = registry.driver_class(target.broker)
    driver: Any = cls(target.settings(), cluster.endpoints(), f"contract_{uuid.uuid4().hex[:10]}")
    driver.setup()
    try:
        yield driver, target
    finally:
        driver.teardown()
        driver.close()


def worker_loop_headers(driver: Any, send: Callable[[], None], expected: int) -> bytes:
    """``run_receiver_lanes`` with two receivers of ``driver`` while ``send`` puts
    ``expected`` messages on its queue, stopped once all are acked (waiting at most 90 s,
    a bound, never an expectation): asserts each was received and acked once; the
    headers the loop recorded."""
    from mqlab.scenario.model import Workload
    from mqlab.workload.recorder import ReceiverStats
    from mqlab.workload.recvlanes import run_receiver_lanes

    stats = [ReceiverStats(), ReceiverStats()]
    stop = threading.Event()
    ready = threading.Barrier(2)
    w = Workload(receive_batch_max=10)
    t = threading.Thread(target=run_receiver_lanes, args=([driver, driver], w, stats, stop, ready))
    try:
        t.start()
        ready.wait(60)
        send()
        give_up = time.monotonic() + 90
        while sum(st.acked_total for st in stats) < expected and time.monotonic() < give_up:
            time.sleep(0.05)
    finally:
        stop.set()
        t.join(60)
    assert not t.is_alive()
    assert sum(st.received_total for st in stats) == expected
    assert sum(st.acked_total for st in stats) == expected
    return b"".join(st.swap()[0] for st in stats)
