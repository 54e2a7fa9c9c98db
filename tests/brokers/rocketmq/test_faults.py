"""The DLedger group under a killed leader, through a whole mqlab run (the sync profile):
the broker leading the group is killed mid-run and restarted 3 s later; Raft elects
another leader, the proxy's route follows it, the senders' failed batches are retried, and
every confirmed message is received; the restarted broker is back in the group. Runs on
the session's shared cluster."""

from __future__ import annotations

from pathlib import Path

import pytest

from mqlab.archive.formats import read_json
from mqlab.brokers.rocketmq.cluster import RocketmqCluster
from tests.conftest import SharedLab, run_story, run_under_faults

pytestmark = pytest.mark.integration

RATE_PER_S, THREADS, DURATION_S = 50, 2, 30
FAULTS = [{"at_s": 6, "action": "kill_leader", "restart_after_s": 3}]


@pytest.mark.timeout(900)
def test_a_run_through_a_killed_leader_loses_no_confirmed_message(
    tmp_path: Path, shared_lab: SharedLab, monkeypatch: pytest.MonkeyPatch
) -> None:
    cluster = shared_lab.cluster("rocketmq")
    assert isinstance(cluster, RocketmqCluster)
    monkeypatch.setenv("MQLAB_STATE_DIR", str(shared_lab.root))  # the run uses that cluster
    result = run_under_faults(
        tmp_path,
        "rocketmq-faults",
        "rocketmq-sync",
        FAULTS,
        duration_s=DURATION_S,
        rate_per_s=RATE_PER_S,
        threads=THREADS,
    )
    assert result.status == "complete", run_story(result)
    manifest = read_json(result.run_dir / "manifest.json")
    assert manifest["broker"]["stand_in"] is None
    assert any("RocketMQ 5.4.0" in v for v in manifest["broker"]["server_versions"])
    actions = [(f["action"], f["node"]) for f in manifest["faults"]]
    assert [a for a, _ in actions] == ["kill_leader", "restart_node"], actions
    assert actions[0][1] == actions[1][1], actions
    d = read_json(result.run_dir / "summary.json")["delivery"]
    print(f"rocketmq kill_leader: {d}; drain {manifest.get('drain')}")
    assert d["confirmed"] > 0 and d["lost"] == 0 and d["undrained"] == 0, d
    # the killed broker, restarted, is back in the group: a leader and 2 followers listed
    # (whether its commit log caught up with the leader's is not asserted: seen here once
    # still behind 120 s after the run, on a machine at load 30-40)
    group = cluster.group()
    assert 0 in group and len(group) == 3, group
