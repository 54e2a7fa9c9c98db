"""Fixtures for the driver contract suite: each broker's real local cluster, shared by the
session."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator
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
