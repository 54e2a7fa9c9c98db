"""Brokers on hosts of their own: PostgreSQL (primary + 2 synchronous standbys), Redis
(primary + 2 replicas) and RabbitMQ (quorum queues, long node names, one epmd per host)
as 3-node clusters across 3 netns hosts, driven by workers on 2 more hosts, each
started over SSH. Needs root; the lab is removed at the end.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from mqlab.archive.formats import read_json
from mqlab.brokers import nodeconf
from mqlab.brokers.postgres.cluster import PostgresCluster
from mqlab.hosts import process
from mqlab.labs.netns import lab as netns_lab
from mqlab.labs.netns import state as netns_state
from mqlab.labs.placement import hosts_of
from mqlab.run import sweep
from tests.conftest import processes_mentioning

pytestmark = [pytest.mark.integration, pytest.mark.slow]
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    state = tmp_path_factory.mktemp("fleet-brokers-state")
    old = os.environ.get("MQLAB_STATE_DIR")
    os.environ["MQLAB_STATE_DIR"] = str(state)
    name = f"brk{os.getpid() % 100000}"
    try:
        netns_lab.up(name, brokers=3, senders=1, receivers=1)
        yield name, state
    finally:
        netns_lab.down(name)
        if old is None:
            os.environ.pop("MQLAB_STATE_DIR", None)
        else:
            os.environ["MQLAB_STATE_DIR"] = old
    assert (
        name
        not in subprocess.run(
            ["ip", "netns", "list"], capture_output=True, text=True, check=True
        ).stdout
    )


def _scenario(tmp: Path, source: str, lab_name: str) -> Path:
    text = (ROOT / "scenarios" / source).read_text()
    assert 'target = "local"' in text
    text = text.replace('target = "local"', 'target = "netns"')
    path = tmp / source
    path.write_text(text + f'\n[cluster.netns]\nlab = "{lab_name}"\n')
    return path


@pytest.mark.timeout(420)
@pytest.mark.parametrize(
    ("source", "server"),
    [
        ("postgres-short.toml", "PostgreSQL"),
        ("redis-short.toml", "redis"),
        ("rabbitmq-short.toml", "RabbitMQ"),
    ],
)
def test_short_run_across_hosts(
    lab: tuple[str, Path], tmp_path: Path, source: str, server: str
) -> None:
    name, _state = lab
    inv = netns_state.find(name)
    assert inv is not None
    addresses = {h.name: h.private_ip for h in inv.inventory.hosts}
    [result] = sweep.execute_files([_scenario(tmp_path, source, name)], tmp_path / "results")
    assert result.status == "complete", result.end_reason
    manifest = read_json(result.run_dir / "manifest.json")
    summary = read_json(result.run_dir / "summary.json")
    d = summary["delivery"]
    assert d["sent"] > 0 and d["lost"] == 0 and d["undrained"] == 0, d
    assert d["unique_received"] == d["confirmed"], d
    # 3 broker nodes, each on its own host at its own address
    hosts = manifest["lab"]["hosts"]
    brokers = sorted(h for h, v in hosts.items() if "broker" in v["role"])
    assert brokers == ["broker-0", "broker-1", "broker-2"], hosts
    assert len({hosts[b]["address"] for b in brokers}) == 3
    # node i of the cluster served from broker host i, at that host's address
    assert [(n["host"], n["address"]) for n in manifest["cluster"]["nodes_at"]] == [
        (b, hosts[b]["address"]) for b in brokers
    ], manifest["cluster"]
    assert any(server.lower() in v.lower() for v in manifest["broker"]["server_versions"])
    # workers ran on their own hosts, from the shipped bundle
    for w in manifest["workers"]:
        assert w["host"] == ("sender-0" if w["role"] == "sender" else "receiver-0"), w
        assert w["address"] == addresses[w["host"]]
        assert "/bundles/" in w["interpreter_prefix"], w
        assert not w["interpreter_prefix"].startswith(str(ROOT)), w
    assert manifest["clock"]["method"] == "ntp-style over ssh"
    assert manifest["clock"]["bound_ms"] is not None, manifest["clock"]
    # the cluster was stopped: nothing of the run or its broker data is left
    assert not processes_mentioning(result.run_dir.name)
    left = [c for _pid, c in processes_mentioning(f"/labs/{name}/") if "/clusters/" in c]
    # PostgreSQL's data dirs are outside the lab: its servers name their host's address
    brokers_at = [hosts[b]["address"] for b in brokers]
    left += [
        c for _pid, c in processes_mentioning("mqlab-pgdata-") if any(a in c for a in brokers_at)
    ]
    assert not left, left
    # nothing listens on the broker hosts any more (RabbitMQ's epmd included)
    std = nodeconf.broker_ports(manifest["broker"]["name"])
    listening = [
        (a, port) for a in brokers_at for port in std.values() if process.port_open(a, port)
    ]
    assert not listening, listening


@pytest.mark.timeout(240)
def test_lab_down_after_a_crash_removes_the_brokers_and_their_data(
    lab: tuple[str, Path], tmp_path: Path
) -> None:
    """The coordinator dies with a PostgreSQL cluster up on the lab (its stop never runs):
    `lab down` ends the servers and removes their data dirs outside the lab's folder.
    Runs last in this module: it takes the lab down."""
    name, _state = lab
    up = netns_state.find(name)
    assert up is not None
    brokers, _s, _r = hosts_of(up.inventory)
    cluster = PostgresCluster(tmp_path / "crashed", 3, brokers)
    cluster.trusted_addresses = [up.inventory.network["coordinator_ip"]]
    cluster.start()
    roots = [Path(r) for r in cluster.extra["data_roots"]]
    assert len(roots) == 3 and all(r.is_dir() for r in roots)
    assert all(cluster.alive())
    for h in brokers:
        h.close()  # what a killed coordinator leaves: servers and data, no stop
    assert netns_lab.down(name)
    assert not [r for r in roots if r.exists()]
    at = [h.address for h in brokers]
    assert not [c for _p, c in processes_mentioning("mqlab-pgdata-") if any(a in c for a in at)]
