"""RabbitMQ quorum queue under a killed leader: the node leading the queue is killed mid-run
and restarted 3 s later; senders and receivers on it lose their connections, reconnect to a
live node and carry on, and every confirmed message is received.

The run lasts longer after the fault than a worker thread's error budget (30 s without one
successful call): a thread that never reconnects fails its worker, and the run with it."""

from __future__ import annotations

from pathlib import Path

import pytest

from mqlab.archive.formats import read_json
from tests.conftest import run_under_faults

pytestmark = pytest.mark.integration

RATE_PER_S, THREADS, DURATION_S = 100, 2, 36
FAULTS = [{"at_s": 4, "action": "kill_leader", "restart_after_s": 3}]


@pytest.mark.timeout(600)  # three RabbitMQ nodes boot in 20-60 s each here
def test_a_run_through_a_killed_leader_completes_and_loses_nothing(
    tmp_path: Path, state_dir: Path
) -> None:
    result = run_under_faults(
        tmp_path,
        "rabbitmq-faults",
        "rabbitmq-quorum",
        FAULTS,
        duration_s=DURATION_S,
        rate_per_s=RATE_PER_S,
        threads=THREADS,
    )
    # no worker gave up: the clients on the killed node reconnected to a live one
    assert result.status == "complete", result.end_reason
    manifest = read_json(result.run_dir / "manifest.json")
    actions = [(f["action"], f["node"]) for f in manifest["faults"]]
    assert [a for a, _ in actions] == ["kill_leader", "restart_node"], actions
    assert actions[0][1] == actions[1][1], actions
    summary = read_json(result.run_dir / "summary.json")
    assert [c["action"] for c in summary["faults"]] == ["kill_leader"], summary["faults"]
    d = summary["delivery"]
    print(f"rabbitmq kill_leader: {d}; drain {manifest.get('drain')}")
    assert d["confirmed"] > 0 and d["lost"] == 0 and d["undrained"] == 0, d
    # the sender thread that was on the killed node sends again: nearly every slot confirmed
    assert d["confirmed"] >= 0.9 * RATE_PER_S * THREADS * DURATION_S, d
