"""RocketMQ's row of the local durability matrix (scenarios/faults/durability-matrix-local.toml,
profile rocketmq-sync) through one mqlab run on the session's shared cluster: the broker
leading the DLedger group killed and restarted 3 s later (Raft elects another leader, the
clients follow the name server to it, the senders' failed batches are retried), a broker
paused for 3 s, then every broker killed at once and restarted 2 s later. Every confirmed
message is received, but for what was sent in the second of the leader's kill (one loss
seen there, in the gRPC client's time: docs/brokers.md); the restarted broker is back in
the group."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from mqlab.archive.codecs import decode_bitmap
from mqlab.archive.formats import read_json
from mqlab.brokers.rocketmq.cluster import RocketmqCluster
from tests.conftest import SharedLab, run_story, run_under_faults

pytestmark = pytest.mark.integration


def lost_by_second(run_dir: Path) -> dict[tuple[str, int], int]:
    """Each confirmed sequence number no receiver recorded, as (sender id, seq), with the
    wall-clock second (ms) in which it was handed to send(): read from the workers' raw
    records (sent.json's bitmaps and marks, delivery.json's bitmaps), not the summary."""
    confirmed: dict[str, set[int]] = {}
    marks: dict[str, list[list[int]]] = {}
    received: dict[str, set[int]] = {}
    for f in (run_dir / "workers").glob("*/sent.json"):
        for sid, rec in read_json(f)["senders"].items():
            confirmed.setdefault(sid, set()).update(decode_bitmap(rec["confirmed_bitmap"]))
            marks.setdefault(sid, []).extend(rec["marks"])
    for f in (run_dir / "workers").glob("*/delivery.json"):
        for sid, rec in read_json(f)["senders"].items():
            received.setdefault(sid, set()).update(decode_bitmap(rec["bitmap"]))
    out = {}
    for sid, seqs in confirmed.items():
        for seq in seqs - received.get(sid, set()):
            out[(sid, seq)] = max(second for second, first in marks[sid] if first <= seq)
    return out


RATE_PER_S, THREADS, DURATION_S = 50, 2, 32
FAULTS = [
    {"at_s": 4, "action": "kill_leader", "restart_after_s": 3},
    {"at_s": 13, "action": "pause_node", "node": 1, "duration_s": 3},
    {"at_s": 22, "action": "crash_all", "restart_after_s": 2},
]


@pytest.mark.timeout(900)
def test_the_matrix_row_loses_nothing_but_what_was_sent_as_the_leader_died(
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
        # as the matrix scenario: a message whose pop crash_all cut off comes again only
        # once the brokers list a master (20-40 s here) and its invisible time is over;
        # the default drain (30 s) once ended first and counted one such message lost
        # and, as it too, receivers that go on through 90 s without a master listed (more
        # than the default 30 s was seen after crash_all on a loaded machine)
        workload={"drain_timeout_s": 90, "error_budget_s": 90},
    )
    assert result.status == "complete", run_story(result)
    manifest = read_json(result.run_dir / "manifest.json")
    assert manifest["broker"]["stand_in"] is None
    assert any("RocketMQ 5.4.0" in v for v in manifest["broker"]["server_versions"])
    actions = [(f["action"], f.get("node")) for f in manifest["faults"]]
    assert [a for a, _ in actions[:2]] == ["kill_leader", "restart_node"], actions
    assert actions[0][1] == actions[1][1], actions
    assert {"pause_node", "crash_all"} <= {a for a, _ in actions}, actions
    summary = read_json(result.run_dir / "summary.json")
    assert [c["action"] for c in summary["faults"]] == ["kill_leader", "pause_node", "crash_all"]
    d = summary["delivery"]
    print(f"rocketmq matrix row: {d}; faults {summary['faults']}; drain {manifest.get('drain')}")
    assert d["confirmed"] > 0 and d["undrained"] == 0, d
    # Lost: 0 in most runs here; in one of two on 2026-11-29, 14 (one batch of 7 per
    # sender, each sent in the second in which the leader was killed, confirmed, never
    # delivered; docs/brokers.md, Apache RocketMQ). Whatever is lost must be of those
    # seconds: anything confirmed well before the kill or after the restart is delivered.
    kill_ms, restart_ms = (f["at_ms"] for f in manifest["faults"][:2])
    lost = lost_by_second(result.run_dir)
    assert len(lost) == d["lost"], (lost, d)
    for (sender, seq), second in lost.items():
        assert kill_ms - 2_000 <= second <= restart_ms, (sender, seq, second, kill_ms)
    # every broker, restarted, is back in the group: a leader and 2 followers listed
    # (whether their commit logs caught up with the leader's is not asserted: seen here
    # once still behind 120 s after the run, on a machine at load 30-40)
    deadline = time.monotonic() + 120
    group = cluster.group()
    while not (0 in group and len(group) == 3):
        assert time.monotonic() < deadline, group
        time.sleep(1)
        group = cluster.group()
