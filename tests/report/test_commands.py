"""`mqlab query`, `compare`, `ls` and the `run` table over summarized tiny archives."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import click
import pytest
from click.testing import CliRunner

from mqlab import cli
from mqlab.archive import layout
from mqlab.cli import data as cli_data
from mqlab.report import compare, query

from .archive import START_MS, write_tiny_run
from .conftest import Lab


def invoke(cmd: click.Command, *args: object) -> tuple[str, str]:
    res = CliRunner().invoke(cmd, [str(a) for a in args])
    assert res.exit_code == 0, (res.output, res.exception)
    return res.stdout, res.stderr


def json_documents(text: str) -> list[dict[str, Any]]:
    """Every JSON document of ``text`` (rich prints one indented document per run)."""
    dec, out, i = json.JSONDecoder(), [], 0
    doc: dict[str, Any]
    while text[i:].strip():
        i += len(text[i:]) - len(text[i:].lstrip())
        doc, i = dec.raw_decode(text, i)
        out.append(doc)
    return out


# -- query -------------------------------------------------------------------------
def test_query_notes_the_runs_without_a_summary(lab: Lab, tmp_path: Path) -> None:
    results = tmp_path / "results"
    results.mkdir()
    for r in (lab.complete, lab.no_delivery):  # no catalog: read in place
        shutil.copytree(r.run_dir, results / r.run_id)
    never = write_tiny_run(results, start_ms=START_MS + 120_000)  # never summarized
    stdout, stderr = invoke(
        cli_data.query, "--results", results, "--json", "SELECT run_id FROM runs ORDER BY run_id"
    )
    assert [r["run_id"] for r in json.loads(stdout)] == [
        lab.complete.run_id,
        lab.no_delivery.run_id,
    ]
    assert f"1 of the 3 run(s) under {results} have no summary yet" in stderr
    assert never.run_id in stderr
    assert lab.complete.run_id not in stderr
    assert "mqlab summarize RUN_DIR, or --all" in stderr
    stdout, _ = invoke(
        cli_data.query,
        "--results",
        results,
        "--json",
        "SELECT run_id, summarized FROM archives ORDER BY run_id",
    )
    assert {r["run_id"]: r["summarized"] for r in json.loads(stdout)} == {
        lab.complete.run_id: True,
        lab.no_delivery.run_id: True,
        never.run_id: False,
    }


def test_query_has_no_note_when_the_catalog_holds_every_run(lab: Lab) -> None:
    stdout, stderr = invoke(cli_data.query, "--results", lab.results, "SELECT count(*) FROM runs")
    assert stderr == ""
    assert stdout.splitlines()[1].strip() == "2"


@pytest.mark.parametrize("sql", query.EXAMPLES)
def test_example_queries_run_on_the_new_schema(lab: Lab, tmp_path: Path, sql: str) -> None:
    columns, rows = query.run_query(lab.results, sql)
    assert columns and rows
    columns, rows = query.run_query(tmp_path, sql)  # no catalog: empty views
    assert columns


def test_timeline_view_and_null_lost(lab: Lab) -> None:
    _, rows = query.run_query(
        lab.results,
        "SELECT run_id, max(backlog) FROM timeline GROUP BY run_id ORDER BY run_id",
    )
    assert [r[0] for r in rows] == [lab.complete.run_id, lab.no_delivery.run_id]
    assert all(r[1] > 0 for r in rows)
    _, rows = query.run_query(lab.results, query.EXAMPLES[2])
    ((broker, runs, lost, lost_unknown, undrained, _dup),) = rows
    assert (broker, runs, lost, lost_unknown) == ("nats", 2, lab.complete.lost, 1)
    assert undrained == lab.complete.undrained + lab.no_delivery.undrained


# -- compare -----------------------------------------------------------------------
def test_compare_shows_unknown_figures_with_the_reason(lab: Lab) -> None:
    stdout, _ = invoke(
        cli_data.compare, "--results", lab.results, lab.complete.run_dir, lab.no_delivery.run_dir
    )
    lost = next(ln for ln in stdout.splitlines() if ln.startswith("lost "))
    assert lost.split()[1:3] == [str(lab.complete.lost), "unknown"]
    assert "contender lost unknown: delivery.json of receiver-01 missing or unreadable" in stdout
    assert "baseline lost unknown" not in stdout
    assert "undrained" in stdout and "send msg p99" in stdout


def test_compare_lines_name_their_column(lab: Lab) -> None:
    base = compare.resolve_run(str(lab.complete.run_dir), lab.results)
    cont = compare.resolve_run(lab.no_delivery.run_id, lab.results)
    lines = {ln.field: ln for ln in compare.compare_runs(base, cont)}
    assert set(lines) == {f for f, _, _ in compare.FIGURES}
    assert lines["delivery_lost"].contender is None and lines["delivery_lost"].ratio is None
    assert lines["delivery_lost"].baseline == lab.complete.lost


def test_compare_with_reference_notes_the_sender_lag(lab: Lab) -> None:
    stdout, _ = invoke(
        cli_data.compare,
        "--results",
        lab.results,
        "--reference",
        "mqperf-2021",
        lab.complete.run_id,
    )
    assert "fell up to 120 ms behind their fixed-rate schedule" in stdout


# -- run table and ls --------------------------------------------------------------
def _summary(run_dir: Path) -> dict[str, Any]:
    return json.loads((run_dir / layout.SUMMARY).read_text())


def test_run_table_shows_unknown_lost_and_undrained(lab: Lab) -> None:
    scenario = layout.read_scenario(lab.no_delivery.run_dir)
    row = cli.mqperf_row(scenario, _summary(lab.no_delivery.run_dir), "x", "partial")
    assert row["lost"] == "unknown" and row["duplicated"] == "unknown"
    assert row["undrained"] == str(lab.no_delivery.undrained)
    (note,) = [n for n in cli.unknown_notes(_summary(lab.no_delivery.run_dir), "x") if "lost" in n]
    assert note == "x: lost unknown: delivery.json of receiver-01 missing or unreadable"
    row = cli.mqperf_row(scenario, _summary(lab.complete.run_dir), "y", "complete")
    assert (row["lost"], row["undrained"]) == (str(lab.complete.lost), str(lab.complete.undrained))
    assert cli.unknown_notes(_summary(lab.complete.run_dir), "y") == []
    assert [c.header for c in cli.mqperf_table([row]).columns][9:11] == ["Lost", "Undrained"]


def test_ls_shows_lost_unknown_and_unsummarized_runs(lab: Lab, tmp_path: Path) -> None:
    results = tmp_path / "results"
    for r in (lab.complete, lab.no_delivery):
        shutil.copytree(r.run_dir, results / r.run_id)
    never = write_tiny_run(results, start_ms=START_MS + 120_000)
    old = results / "2024-01-01T00-00-00Z_old_nats-r3_1t-1s-1r"
    old.mkdir()
    (old / layout.MANIFEST).write_text(json.dumps({"format_version": 1, "status": "complete"}))
    stdout, stderr = invoke(cli.main, "ls", "--results", results, "--json")
    rows = {r["run_id"]: r for r in json_documents(stdout)}
    assert rows[lab.complete.run_id]["lost"] == lab.complete.lost
    assert rows[lab.complete.run_id]["undrained"] == lab.complete.undrained
    assert rows[lab.complete.run_id]["unknown"] == {}
    assert rows[lab.no_delivery.run_id]["lost"] is None
    assert rows[lab.no_delivery.run_id]["status"] == "partial"
    assert "receiver-01" in rows[lab.no_delivery.run_id]["unknown"]["lost"]
    assert rows[never.run_id]["summarized"] is False
    assert rows[old.name]["status"] == "archive format_version 1"

    stdout, stderr = invoke(cli.main, "ls", "--results", results)
    lines = {ln.split()[1]: ln for ln in stdout.splitlines() if "Z_" in ln}
    assert "unknown" in lines[lab.no_delivery.run_id]
    assert "unknown" not in lines[lab.complete.run_id]
    assert "–" in lines[never.run_id]
    assert "mqlab 0.1" in stderr  # how to get figures for the old run


def test_summarize_prints_the_reasons_of_unknown_figures(
    lab: Lab, capsys: pytest.CaptureFixture[str]
) -> None:
    cli_data._echo_unknown("r", _summary(lab.no_delivery.run_dir))
    cli_data._echo_unknown("c", _summary(lab.complete.run_dir))
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 1  # one reason, naming every figure it makes unknown
    assert out[0].startswith("r: received, first_received, unique_received, lost, ")
    assert "lost" in out[0] and out[0].endswith(
        "delivery.json of receiver-01 missing or unreadable"
    )
