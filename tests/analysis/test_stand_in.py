"""Runs served by a local stand-in (tansu, moto, mongoeco) are marked as such wherever
their figures show: summary, run table, `mqlab ls`, report, reference comparison."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from mqlab.analysis.catalog import read_run_table
from mqlab.analysis.job import summarize_run
from mqlab.analysis.plan import stand_in_of
from mqlab.archive import layout
from mqlab.archive.formats import read_json, write_json
from mqlab.cli import mark_notes, mqperf_columns, mqperf_row
from mqlab.cli.data import compare
from mqlab.published import reference
from mqlab.report import listing
from mqlab.report.markdown import report_run
from tests.fixtures.synthetic import SyntheticSpec, write_synthetic_run

TANSU = "tansu, a Kafka API stand-in (one node, memory storage, no replication)"


def test_the_manifest_says_what_served_and_older_archives_are_read_from_the_versions() -> None:
    assert stand_in_of({"broker": {"stand_in": TANSU}}) == TANSU
    assert stand_in_of({"broker": {"stand_in": None, "server_versions": ["x (stand-in)"]}}) == ""
    # before the manifest said so, the stand-ins named themselves in their versions
    old = {"broker": {"server_versions": ["tansu 0.6.0 (Kafka API stand-in)"]}}
    assert stand_in_of(old) == "tansu 0.6.0 (Kafka API stand-in)"
    assert stand_in_of({"broker": {"server_versions": ["moto 5.1 (SQS API emulator)"]}})
    assert stand_in_of({"broker": {"server_versions": ["nats-server 2.15.1"]}}) == ""
    assert stand_in_of({}) == ""


def test_a_stand_in_run_is_marked_in_every_place_that_shows_its_figures(tmp_path: Path) -> None:
    run = write_synthetic_run(
        tmp_path, SyntheticSpec(broker="kafka", profile="kafka-standin", scenario="kafka-short")
    )
    manifest = read_json(run.run_dir / layout.MANIFEST)
    manifest["broker"]["stand_in"] = TANSU
    write_json(run.run_dir / layout.MANIFEST, manifest)
    summary = summarize_run(run.run_dir)
    assert summary["stand_in"] == TANSU
    [row] = read_run_table(run.run_dir, "runs").to_pylist()
    assert row["stand_in"] == TANSU
    # the run table and its note
    scenario = {
        "clients": {
            "sender_threads": 5,
            "receiver_threads": 5,
            "sender_nodes": 1,
            "receiver_nodes": 2,
        }
    }
    printed = mqperf_row(scenario, summary, "kafka-standin_5t-1s-2r", "complete")
    assert printed["marks"].startswith("stand-in")
    assert ("marks", "Marks") in mqperf_columns([printed])
    assert mark_notes(summary, "r")[0].startswith(f"r: stand-in: {TANSU} served")
    # mqlab ls
    [listed] = listing.list_runs(run.run_dir.parent)
    columns, [cells] = listing.table([listing.row(listed)])
    assert cells[columns.index("Marks")].startswith("stand-in")
    # the report
    text = report_run(run.run_dir).read_text()
    assert "Marked **stand-in" in text
    assert f"{TANSU} served, not kafka itself: never quote these figures as kafka's" in text
    # next to published figures
    notes = reference.measurement_notes(row)
    assert notes[0].startswith(f"STAND-IN: {TANSU} served this run, not kafka")
    # mqlab compare, run against run
    res = CliRunner().invoke(
        compare, ["--results", str(run.run_dir.parent), run.run_id, run.run_id]
    )
    assert res.exit_code == 0, res.output
    assert f"baseline:  {run.run_id} (1 trials; marked stand-in" in res.output
    # the site's index flags it
    from mqlab.report.site import write_site

    built = write_site(run.run_dir.parent, run.run_dir.parent.parent / "site")
    assert f'title="{TANSU} served, not the real system">stand-in</span>' in (
        built.index.read_text()
    )


def test_a_real_server_s_run_has_no_stand_in_mark(tmp_path: Path) -> None:
    run = write_synthetic_run(tmp_path, SyntheticSpec())
    manifest = read_json(run.run_dir / layout.MANIFEST)
    manifest["broker"]["stand_in"] = None
    write_json(run.run_dir / layout.MANIFEST, manifest)
    summary = summarize_run(run.run_dir)
    assert summary["stand_in"] is None and mark_notes(summary, "r") == []
    assert "stand-in" not in report_run(run.run_dir).read_text()
