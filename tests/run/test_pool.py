"""The run's cluster pool and a profile's server configuration (``LocalCluster.
server_config``), with fake launchers: one cluster per configuration, the cluster of
another configuration stopped before the next starts, a cluster left up by `mqlab cluster
up` used only when it was started the same way, and a refusal on a lab whose images
start the servers themselves. The real clusters: tests/brokers/rocketmq/test_controller.py."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from mqlab.brokers import local
from mqlab.errors import ClusterError
from mqlab.hosts.local import LocalHost
from mqlab.labs.placement import Placement
from mqlab.run import pool as pool_mod
from mqlab.run.context import Observer
from mqlab.run.pool import ClusterPool
from mqlab.scenario.load import load_scenario

ROOT = Path(__file__).resolve().parents[2]
SYNCFLUSH = {"flush": "sync", "replication": "all_in_sync"}


class FakeCluster:
    """Records what the pool does with it; ``server_config`` as RocketMQ's launcher."""

    started: list[FakeCluster] = []

    def __init__(self, workdir: Path, nodes: int, hosts: Any = None, server: Any = None):
        self.workdir, self.nodes, self.server = workdir, nodes, dict(server or {})
        self.broker = "rocketmq"
        self.running = False
        self.attached = False

    @classmethod
    def server_config(cls, settings: Any) -> dict[str, str]:
        server: dict[str, str] = settings.server()
        return server

    def start(self, progress: Any) -> None:
        self.running = True
        FakeCluster.started.append(self)

    def stop(self) -> None:
        self.running = False

    def alive(self) -> list[bool]:
        return [self.running] * self.nodes


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> type[FakeCluster]:
    FakeCluster.started = []
    monkeypatch.setenv("MQLAB_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setattr(local, "cluster_class", lambda broker: FakeCluster)
    monkeypatch.setattr(local, "find_running", lambda broker: None)
    return FakeCluster


def scenario(profile: str) -> Any:
    [s] = load_scenario(ROOT / "scenarios" / "rocketmq-short.toml")
    p = load_scenario_profile(profile)
    return dataclasses.replace(s, profile=p)


def load_scenario_profile(name: str) -> Any:
    from mqlab.scenario.load import load_profile

    return load_profile(ROOT / "scenarios" / "profiles" / f"{name}.toml")


def here(kind: str = "local") -> Placement:
    h = LocalHost()
    return Placement(kind, kind, [h] * 3, [h], [h])


def test_one_cluster_per_server_configuration_the_other_stopped_first(
    fake: type[FakeCluster],
) -> None:
    pool = ClusterPool(Observer())
    dledger, reused = pool.get(scenario("rocketmq-sync"), here())
    assert not reused and dledger.server == {}
    again, reused = pool.get(scenario("rocketmq-sync"), here())
    assert again is dledger and reused is False  # the pool's own, not one found running
    controller, _ = pool.get(scenario("rocketmq-syncflush"), here())
    assert controller is not dledger and controller.server == SYNCFLUSH
    assert not dledger.running and controller.running  # never both sets of JVMs at once
    assert pool.get(scenario("rocketmq-syncflush"), here())[0] is controller
    back, _ = pool.get(scenario("rocketmq-sync"), here())
    assert back is not dledger and back.server == {} and not controller.running
    assert len(fake.started) == 3
    pool.close()
    assert not back.running


def test_a_cluster_left_up_is_used_only_when_started_the_same_way(
    fake: type[FakeCluster], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    up = FakeCluster(tmp_path / "up", 3, server=SYNCFLUSH)
    up.running = True
    monkeypatch.setattr(local, "find_running", lambda broker: up)
    pool = ClusterPool(Observer())
    got, reused = pool.get(scenario("rocketmq-syncflush"), here())
    assert got is up and reused is True and fake.started == []
    other, reused = pool.get(scenario("rocketmq-async"), here())
    assert other is not up and not reused and other.server["replication"] == "async"
    assert up.running  # not the pool's to stop
    pool.close()
    assert up.running and not other.running


def test_a_lab_whose_images_start_the_servers_refuses_another_layout(
    fake: type[FakeCluster],
) -> None:
    s = scenario("rocketmq-async")
    with pytest.raises(ClusterError) as e:
        pool_mod.server_config(s, here("aws"))
    assert "rocketmq-async" in str(e.value) and "local cluster" in str(e.value)
    assert pool_mod.server_config(scenario("rocketmq-sync"), here("aws")) == {}


def test_cluster_up_starts_the_layout_a_profile_names(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """`mqlab cluster up rocketmq --profile NAME` passes the profile's server configuration
    to the launcher (here a recording stand-in for local.up); a profile of another broker
    or an unknown one is one line and exit 2, nothing started."""
    from click.testing import CliRunner

    from mqlab.cli import main

    asked: list[tuple[str, dict[str, str]]] = []

    class Up:
        nodes = 3

        def endpoints(self) -> Any:
            return type("E", (), {"to_json": lambda self: {}})()

    def up(broker: str, nodes: Any, progress: Any, server: Any = None) -> Up:
        asked.append((broker, dict(server or {})))
        return Up()

    monkeypatch.setattr(local, "up", up)
    runner = CliRunner()
    ok = runner.invoke(main, ["cluster", "up", "rocketmq", "--profile", "rocketmq-syncflush"])
    assert ok.exit_code == 0, ok.output
    plain = runner.invoke(main, ["cluster", "up", "rocketmq"])
    assert plain.exit_code == 0, plain.output
    assert asked == [("rocketmq", SYNCFLUSH), ("rocketmq", {})]
    other = runner.invoke(main, ["cluster", "up", "rocketmq", "--profile", "kafka-isr"])
    assert other.exit_code == 2 and "is for kafka, not rocketmq" in other.output
    unknown = runner.invoke(main, ["cluster", "up", "rocketmq", "--profile", "nope"])
    assert unknown.exit_code == 2 and "unknown profile 'nope'" in unknown.output
    assert len(asked) == 2
