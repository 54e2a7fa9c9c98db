"""The committed run archives under results/ are real, complete and true: every file is in
git, each archive re-summarizes from its raw worker logs to the summary it carries, and
the figures the README quotes are those of the archive it names."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import tomllib
from pathlib import Path

import pytest

from mqlab.analysis.job import summarize_run
from mqlab.brokers import registry
from mqlab.cli import mqperf_columns, mqperf_row
from tests.fixtures.committed import ROOT, committed_runs, tracked

RESULTS = ROOT / "results"
MATRIX = RESULTS / "durability-matrix"  # one run of scenarios/faults/durability-matrix.toml
TOP = committed_runs("results/*")  # the quickstart and the short runs
SEEDS = committed_runs("results/seeds/**")  # runs of scenarios/seeds/
RUNS = TOP + committed_runs("results/durability-matrix/*") + SEEDS
DERIVED = ("summary", "summary.json", "report.md", "*.png")  # what summarize and report write


def _tracked(under: Path) -> set[str]:
    out = subprocess.run(
        ["git", "ls-files", "--", str(under.relative_to(ROOT))],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return {line for line in out.splitlines() if line}


def _resummarized(run: Path, tmp: Path) -> dict:
    copy = tmp / "results" / run.name
    shutil.copytree(run, copy, ignore=shutil.ignore_patterns(*DERIVED))
    return summarize_run(copy, results_dir=tmp / "results")


def test_there_is_the_quickstart_and_a_short_run_per_local_broker() -> None:
    brokers = set()
    for run in TOP:
        brokers.add(json.loads((run / "manifest.json").read_text())["broker"]["name"])
    local = {b.name for b in registry.BROKERS.values() if b.local_cluster is not None}
    assert local <= brokers, local - brokers
    # about 320 kB a run (its plots and Parquet tables included)
    size = sum(f.stat().st_size for run in TOP for f in run.rglob("*") if f.is_file())
    assert size < 3_600_000, f"committed archives take {size:,} bytes"


@pytest.mark.parametrize("run", RUNS, ids=lambda p: p.name)
def test_every_file_of_a_committed_archive_is_in_git(run: Path) -> None:
    on_disk = {
        str(f.relative_to(ROOT))
        for f in run.rglob("*")
        if f.is_file() and "__pycache__" not in str(f)
    }
    missing = on_disk - _tracked(run)
    assert not missing, f"not in git (an ignore rule?): {sorted(missing)[:5]}"
    for name in ("manifest.json", "scenario.toml", "summary.json", "report.md"):
        assert (run / name).is_file(), name
    assert list((run / "workers").glob("*/*.hlog")), "raw HdrHistogram logs"


@pytest.mark.parametrize("run", RUNS, ids=lambda p: p.name)
def test_a_committed_archive_re_summarizes_to_the_summary_it_carries(
    run: Path, tmp_path: Path
) -> None:
    fresh = _resummarized(run, tmp_path)
    committed = json.loads((run / "summary.json").read_text())
    assert fresh == committed


def _local_seed_scenarios() -> dict[str, Path]:
    """Seed scenarios that run on this machine (target local), by scenario name."""
    out = {}
    for p in sorted((ROOT / "scenarios" / "seeds").rglob("*.toml")):
        doc = tomllib.loads(p.read_text())
        if doc.get("cluster", {}).get("target", "local") == "local":
            out[doc.get("name", p.stem)] = p
    return out


def test_every_local_seed_scenario_has_a_committed_run_beside_its_reference() -> None:
    local = _local_seed_scenarios()
    assert local, "no local scenarios under scenarios/seeds/"
    ran: dict[str, list[Path]] = {}
    for run in SEEDS:
        doc = tomllib.loads((run / "scenario.toml").read_text())
        ran.setdefault(doc["name"], []).append(run)
        source = local.get(doc["name"])
        assert source is not None, f"{run.name}: no local seed scenario named {doc['name']}"
        wanted = tomllib.loads(source.read_text()).get("reference")
        assert doc.get("reference") == wanted, run.name  # run as the file says now
        if wanted:
            assert "## Published reference" in (run / "report.md").read_text(), run.name
    assert set(local) <= set(ran), sorted(set(local) - set(ran))
    size = sum(f.stat().st_size for run in SEEDS for f in run.rglob("*") if f.is_file())
    # about 420 kB a run, its plots and Parquet tables included (78 runs)
    assert size < 40_000_000, f"committed seed archives take {size:,} bytes"


@pytest.mark.parametrize(
    "name",
    [
        "durability-matrix",
        "durability-matrix-local",
        "durability-matrix-behind",
        "durability-matrix-behind-kafka",
        "durability-matrix-behind-rocketmq",
    ],
)
def test_the_committed_durability_matrix_is_one_run_per_profile_through_every_fault(
    name: str,
) -> None:
    """The matrix folder holds one run per profile of each matrix scenario: the five faults
    at a low fixed rate, and the partition struck behind a backlog."""
    scenario = tomllib.loads((ROOT / "scenarios" / "faults" / f"{name}.toml").read_text())
    runs = [
        r
        for r in RUNS
        if r.parent == MATRIX and tomllib.loads((r / "scenario.toml").read_text())["name"] == name
    ]
    profiles = [json.loads((r / "manifest.json").read_text())["broker"]["profile"] for r in runs]
    assert sorted(profiles) == sorted(scenario["profile"])
    actions = [f["action"] for f in scenario["faults"]]
    kinds = [f.get("partition", "") for f in scenario["faults"]]
    for r in runs:
        summary = json.loads((r / "summary.json").read_text())
        assert [f["action"] for f in summary["faults"]] == actions, r.name
        assert [f["kind"] for f in summary["faults"]] == kinds, r.name
        assert summary["status"] == "complete", r.name
        manifest = json.loads((r / "manifest.json").read_text())
        assert manifest["cluster"]["target"] == scenario["cluster"]["target"], r.name
        # every cell holds a measured figure: lost, repeats and the outage of each fault
        for f in summary["faults"]:
            cell = (f["lost"], f["repeats"], f["unavailable_send_s"])
            assert None not in cell, (r.name, f["label"])
    [report] = tracked("results/durability-matrix/reports/*/sweep-report.md")
    text = report.read_text()
    assert "## Durability matrix" in text
    assert "unknown" not in text.split("## Durability matrix", 1)[1]


def test_the_readme_quotes_the_archive_it_names(tmp_path: Path) -> None:
    text = (ROOT / "README.md").read_text()
    section = text.split("## What a result looks like", 1)[1].split("\n## ", 1)[0]
    named = re.findall(r"`(results/[^`/]+)/`", section)
    assert named, "the README names the committed run it shows"
    run = ROOT / named[0]
    assert run in RUNS, run
    block = section.split("```", 2)[1].strip().splitlines()
    header, row = block[1], block[2]
    quoted = re.split(r"\s{2,}", row.strip())
    fresh = _resummarized(run, tmp_path)
    scenario = tomllib.loads((run / "scenario.toml").read_text())
    expected = mqperf_row(scenario, fresh, quoted[0], fresh["status"])
    columns = mqperf_columns([expected])
    assert re.split(r"\s{2,}", header.strip()) == [title for _k, title in columns]
    assert quoted == [str(expected[k]) for k, _title in columns]
    assert run.name.endswith("_" + quoted[0]), (run.name, quoted[0])


def test_the_backlog_column_shows_what_an_asynchronous_failover_loses() -> None:
    """The leader cut off behind a backlog: Redis without WAIT loses messages it had
    confirmed (counted from the delivery records by the summary), with WAIT 1 none; both
    runs' receivers were behind, so the matrix puts them in the backlog column."""
    runs = {
        json.loads((r / "manifest.json").read_text())["broker"]["profile"]: r
        for r in RUNS
        if r.parent == MATRIX and "_durability-matrix-behind_" in r.name
    }
    cost = {}
    for profile, r in runs.items():
        summary = json.loads((r / "summary.json").read_text())
        assert summary["saturation"]["receivers_behind"] is True, r.name
        [f] = summary["faults"]
        assert f["kind"] == "leader_from_brokers"
        cost[profile] = (f["sent"], f["lost"])
    sent, lost = cost["redis-async"]
    assert 0 < lost <= sent
    assert cost["redis-wait1"][1] == 0
    [report] = tracked("results/durability-matrix/reports/*/sweep-report.md")
    text = report.read_text()
    assert "| partition: leader_from_brokers (receivers behind) |" in text
    assert f"| redis | redis-async | – | – | – | – | – | lost {lost:,} ·" in text


def test_the_backlog_column_shows_what_kafka_acks_1_loses_and_acks_all_does_not() -> None:
    """Kafka's pair, the leader of partition 0 cut off for 30 s: acks=1 loses what the old
    leader confirmed while cut off (its receivers behind, so in the backlog column); with
    acks=all nothing confirmed is lost, and its receiver kept up (a send waits for the
    in-sync replicas), so the matrix puts it in the plain partition column, as its
    saturation flag says."""
    runs = {
        json.loads((r / "manifest.json").read_text())["broker"]["profile"]: r
        for r in RUNS
        if r.parent == MATRIX and "_durability-matrix-behind-kafka_" in r.name
    }
    assert sorted(runs) == ["kafka-async", "kafka-isr"]
    cells = {}
    for profile, r in runs.items():
        summary = json.loads((r / "summary.json").read_text())
        [f] = summary["faults"]
        assert f["kind"] == "leader_from_brokers"
        cells[profile] = (f["sent"], f["lost"], summary["saturation"]["receivers_behind"])
        manifest = json.loads((r / "manifest.json").read_text())
        assert manifest["broker"]["server_versions"] == ["Apache Kafka 4.4.0"], r.name
    sent, lost, behind = cells["kafka-async"]
    assert behind and 0 < lost <= sent
    assert cells["kafka-isr"][1] == 0
    [report] = tracked("results/durability-matrix/reports/*/sweep-report.md")
    text = report.read_text()
    assert f"| kafka | kafka-async | – | – | – | – | – | lost {lost:,} ·" in text
    matrix = text.split("## Durability matrix", 1)[1].splitlines()
    header = next(line for line in matrix if line.startswith("| broker |"))
    names = [c.strip() for c in header.strip("|").split("|")]
    # the backlog column, or the plain partition; the local matrix's kafka-isr row (no
    # partition) has "–" there
    name = "partition: leader_from_brokers" + (
        " (receivers behind)" if cells["kafka-isr"][2] else ""
    )
    at = names.index(name)
    rows = [line for line in matrix if line.startswith("| kafka | kafka-isr |")]
    [row] = [r for r in rows if [c.strip() for c in r.strip("|").split("|")][at] != "–"]
    assert [c.strip() for c in row.strip("|").split("|")][at].startswith("lost 0 ·"), row


def test_the_backlog_column_shows_what_rocketmqs_asynchronous_replication_loses() -> None:
    """RocketMQ's pair in controller mode, the master's host cut from the other brokers for
    30 s behind a backlog: rocketmq-async loses messages it had confirmed (the old master
    answered alone, its log cut back when it rejoined), counted from the delivery records
    by the summary; rocketmq-syncflush (every in-sync replica, SYNC_FLUSH) none; nor
    rocketmq-sync, the DLedger layout (a majority), whose run drained completely once its
    receiver left the demoted leader. The manifests name the layout each ran on."""
    runs = {
        json.loads((r / "manifest.json").read_text())["broker"]["profile"]: r
        for r in RUNS
        if r.parent == MATRIX and "_durability-matrix-behind-rocketmq_" in r.name
    }
    assert sorted(runs) == ["rocketmq-async", "rocketmq-sync", "rocketmq-syncflush"]
    cells = {}
    for profile, r in runs.items():
        summary = json.loads((r / "summary.json").read_text())
        [f] = summary["faults"]
        assert f["kind"] == "leader_from_brokers"
        cells[profile] = (f["sent"], f["lost"], summary["delivery"]["lost"])
        [version] = json.loads((r / "manifest.json").read_text())["broker"]["server_versions"]
        if profile == "rocketmq-sync":
            assert version.startswith("RocketMQ 5.4.0 (DLedger broker group"), version
            assert summary["delivery"]["undrained"] == 0
            continue
        assert version.startswith("RocketMQ 5.4.0 (controller mode"), version
        flush = "SYNC_FLUSH" if profile == "rocketmq-syncflush" else "ASYNC_FLUSH"
        assert flush in version, version
    sent, lost, lost_in_run = cells["rocketmq-async"]
    assert 0 < lost <= sent and lost <= lost_in_run
    for profile in ("rocketmq-syncflush", "rocketmq-sync"):
        assert cells[profile][1] == cells[profile][2] == 0, profile
    [report] = tracked("results/durability-matrix/reports/*/sweep-report.md")
    text = report.read_text()
    assert f"| rocketmq | rocketmq-async | – | – | – | – | – | lost {lost:,} ·" in text
