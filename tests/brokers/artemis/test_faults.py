"""ActiveMQ Artemis through the local durability matrix's three faults (its row in
scenarios/faults/durability-matrix-local.toml): the primary killed mid-run and restarted
3 s later (the backup takes the ZooKeeper lock and serves, the spare becomes its backup,
the old primary comes back as a backup), a node paused, every node crashed at once. The
senders and receivers fail over to whichever instance serves, and every confirmed message
is received."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from mqlab.archive.formats import read_json
from tests.conftest import run_under_faults

pytestmark = pytest.mark.integration

MATRIX = Path(__file__).parents[3] / "scenarios" / "faults" / "durability-matrix-local.toml"


def test_the_matrix_has_an_artemis_row() -> None:
    matrix = tomllib.loads(MATRIX.read_text())
    assert "artemis-local" in matrix["profile"]


@pytest.mark.timeout(600)
def test_the_primary_killed_a_node_paused_and_all_crashed_lose_no_confirmed_message(
    tmp_path: Path, state_dir: Path
) -> None:
    matrix = tomllib.loads(MATRIX.read_text())
    w = matrix["workload"]
    result = run_under_faults(
        tmp_path,
        "artemis-faults",
        "artemis-local",
        matrix["faults"],
        duration_s=w["duration_s"],
        rate_per_s=w["rate_per_s"],
        threads=matrix["clients"]["threads"],
        message_bytes=w["message_bytes"],
        warmup_s=w["warmup_s"],
    )
    assert result.status == "complete", result.end_reason
    manifest = read_json(result.run_dir / "manifest.json")
    actions = [f["action"] for f in manifest["faults"]]
    assert actions[0] == "kill_leader" and "crash_all" in actions, actions
    assert "ActiveMQ Artemis 2.40.0" in str(manifest), "the manifest names the server"
    summary = read_json(result.run_dir / "summary.json")
    cells = {c["action"]: c for c in summary["faults"]}
    assert set(cells) == {"kill_leader", "pause_node", "crash_all"}, cells
    d = summary["delivery"]
    print(f"artemis faults: {d}; cells {cells}; drain {manifest.get('drain')}")
    assert d["confirmed"] > 0 and d["lost"] == 0 and d["undrained"] == 0, d
