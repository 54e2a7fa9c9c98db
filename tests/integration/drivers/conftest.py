"""Fixtures for the driver contract suite: one real local cluster per broker per session."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from mqlab.clusters.base import LocalCluster
from mqlab.clusters.local import cluster_class
from mqlab.drivers import registry
from mqlab.drivers.base import Driver
from tests.integration.drivers.targets import TARGETS, Target


@pytest.fixture(scope="session")
def clusters(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, LocalCluster]]:
    started: dict[str, LocalCluster] = {}
    yield started
    for c in started.values():
        c.stop()


def _cluster(clusters: dict[str, LocalCluster], target: Target, base: Path) -> LocalCluster:
    key = registry.BROKERS[target.broker].local_cluster or target.broker
    if key not in clusters:
        c = cluster_class(target.broker)(base / f"{key}-cluster", target.nodes)
        c.start()
        clusters[key] = c
    return clusters[key]


@pytest.fixture(params=sorted(TARGETS), ids=sorted(TARGETS))
def contract(
    request: pytest.FixtureRequest,
    clusters: dict[str, LocalCluster],
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[Driver, Target]]:
    target = TARGETS[request.param]
    cluster = _cluster(clusters, target, tmp_path_factory.getbasetemp())
    cls = registry.driver_class(target.broker)
    driver: Any = cls(target.settings(), cluster.endpoints(), f"contract_{uuid.uuid4().hex[:10]}")
    driver.setup()
    try:
        yield driver, target
    finally:
        driver.teardown()
        driver.close()
