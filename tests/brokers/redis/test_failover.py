"""Redis under a killed primary: Sentinel promotes a replica mid-run and the workers follow
it. With asynchronous replication (``redis-async``) a send returns once the primary has
the entries, so the failover may lose acknowledged sends; with ``WAIT 1``
(``redis-wait1``) a send returns only once a replica has them too."""

from __future__ import annotations

from pathlib import Path

import pytest

from mqlab.archive.formats import read_json
from tests.conftest import run_under_faults

pytestmark = pytest.mark.integration

FAULTS = [{"at_s": 4, "action": "kill_leader", "restart_after_s": 8}]


@pytest.mark.timeout(240)
@pytest.mark.parametrize("profile", ["redis-async", "redis-wait1"])
def test_a_run_through_a_failover_completes_and_accounts_for_every_message(
    profile: str, tmp_path: Path, state_dir: Path
) -> None:
    result = run_under_faults(
        tmp_path,
        "redis-failover",
        profile,
        FAULTS,
        duration_s=16,
        rate_per_s=300,
        message_bytes=256,
        warmup_s=0,
        workload={"drain_timeout_s": 45},
    )
    assert result.status == "complete", result.end_reason
    manifest = read_json(result.run_dir / "manifest.json")
    # node 0 is the primary at the start; it is killed, and restarted 8 s later
    actions = [(f["action"], f["node"]) for f in manifest["faults"]]
    assert actions == [("kill_leader", 0), ("restart_node", 0)], actions
    assert manifest["drain"]["ended_by"] == "broker empty", manifest["drain"]
    d = read_json(result.run_dir / "summary.json")["delivery"]
    print(f"{profile}: {d}")
    print(f"{profile}: lost {d['lost']} of {d['confirmed']} confirmed sends")
    # the senders kept going after the failover: more was confirmed than the 4 s before it
    assert d["confirmed"] > 2 * 300 * 4, d
    assert d["failed"] > 0, d  # sends failed while there was no primary: it did fail over
    assert d["undrained"] == 0, d
    assert d["lost"] is not None and d["lost"] >= 0, d
    assert d["confirmed"] <= d["sent"], d
    assert d["unique_received"] + d["undrained"] + d["lost"] >= d["confirmed"], d
    if profile == "redis-wait1":
        assert d["lost"] == 0, d
