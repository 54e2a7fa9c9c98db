"""Kafka under a killed leader (the real 3-node cluster, profile ``kafka-isr``: acks=all,
min.insync.replicas 2): the node leading the topic's partition 0 is SIGKILLed mid-run and
restarted 3 s later. The controllers fence it once its session times out, the partitions it
led move to in-sync replicas, the senders retry there, and every confirmed message is
received. Runs on the session's shared cluster (the "already up" path), which it leaves
healthy again."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from mqlab.archive.formats import read_json
from mqlab.brokers import local
from mqlab.brokers.kafka.cluster import KafkaCluster
from tests.conftest import SharedLab, run_under_faults

pytestmark = pytest.mark.integration

FAULTS = [{"at_s": 4, "action": "kill_leader", "restart_after_s": 3}]


@pytest.mark.timeout(600)
def test_a_killed_leader_loses_no_confirmed_message(
    tmp_path: Path, shared_lab: SharedLab, monkeypatch: pytest.MonkeyPatch
) -> None:
    shared_lab.cluster("kafka")  # up before the run, which then reuses it
    monkeypatch.setenv("MQLAB_STATE_DIR", str(shared_lab.root))
    result = run_under_faults(
        tmp_path, "kafka-faults", "kafka-isr", FAULTS, duration_s=16, rate_per_s=50, threads=2
    )
    assert result.status == "complete", result.end_reason
    manifest = read_json(result.run_dir / "manifest.json")
    assert manifest["cluster"]["reused"] is True
    assert manifest["broker"]["stand_in"] is None
    actions = [(f["action"], f["node"]) for f in manifest["faults"]]
    assert [a for a, _ in actions] == ["kill_leader", "restart_node"], actions
    assert actions[0][1] == actions[1][1], actions
    d = read_json(result.run_dir / "summary.json")["delivery"]
    print(f"kafka kill_leader: {d}; drain {manifest.get('drain')}")
    assert d["confirmed"] > 0 and d["lost"] == 0 and d["undrained"] == 0, d
    # the cluster the next tests share (its state as the run left it): every node back in sync
    cluster = KafkaCluster.load(local.named_dir("kafka", shared_lab.root))
    deadline = time.monotonic() + 120
    while not cluster.health()["healthy"]:
        assert time.monotonic() < deadline, cluster.health()
        time.sleep(1)
