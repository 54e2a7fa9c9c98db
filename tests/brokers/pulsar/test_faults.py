"""Pulsar's row of the local durability matrix (scenarios/faults/durability-matrix-local.toml):
the broker owning the topic killed and restarted 3 s later, a broker paused for 3 s, then
every process (ZooKeeper, bookies, brokers) killed at once and restarted, through one
fixed-rate run on the session's shared cluster (``mqlab run``'s "already up" path).
Profile pulsar-r3: a send returns once 2 of the 3 bookies have fsynced each entry, so no
confirmed message may be lost, whatever the faults cost in availability."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from mqlab.archive.formats import read_json
from mqlab.brokers.pulsar.cluster import PulsarCluster
from tests.conftest import SharedLab, run_under_faults

pytestmark = pytest.mark.integration

FAULTS = [
    {"at_s": 4, "action": "kill_leader", "restart_after_s": 3},
    {"at_s": 13, "action": "pause_node", "node": 1, "duration_s": 3},
    {"at_s": 22, "action": "crash_all", "restart_after_s": 2},
]


@pytest.mark.timeout(600)
def test_the_matrix_row_loses_no_confirmed_message(
    tmp_path: Path, shared_lab: SharedLab, monkeypatch: pytest.MonkeyPatch
) -> None:
    cluster = shared_lab.cluster("pulsar")
    assert isinstance(cluster, PulsarCluster)
    monkeypatch.setenv("MQLAB_STATE_DIR", str(shared_lab.root))
    result = run_under_faults(
        tmp_path, "pulsar-faults", "pulsar-r3", FAULTS, duration_s=32, rate_per_s=100
    )
    manifest = read_json(result.run_dir / "manifest.json")
    actions = [f["action"] for f in manifest["faults"]]
    assert actions[:2] == ["kill_leader", "restart_node"], actions
    assert "pause_node" in actions and "crash_all" in actions, actions
    assert manifest["broker"]["stand_in"] is None
    assert any("Apache Pulsar 4.2.4" in v for v in manifest["broker"]["server_versions"])
    summary = read_json(result.run_dir / "summary.json")
    assert [c["action"] for c in summary["faults"]] == ["kill_leader", "pause_node", "crash_all"]
    d = summary["delivery"]
    print(f"pulsar matrix row: {d}; status {result.status}; drain {manifest.get('drain')}")
    # every confirmed message received: those received less the unconfirmed (failed) sends
    # that came anyway
    assert d["confirmed"] > 0 and d["unique_received"] - d["recovered"] == d["confirmed"], d
    # lost is unknown (None) only while the broker still counts messages it never hands out:
    # after crash_all its backlog sometimes counted the entries of sends that timed out
    # (unconfirmed), never more of them than failed
    assert d["lost"] == 0 or (d["lost"] is None and 0 < d["undrained"] <= d["failed"]), d
    # the cluster serves again for the tests after this one (its state as the run left it:
    # crash_all restarted every process)
    deadline = time.monotonic() + 240
    health = PulsarCluster.load(cluster.workdir).health()
    while not health["healthy"]:
        assert time.monotonic() < deadline, health
        time.sleep(2)
        health = PulsarCluster.load(cluster.workdir).health()
