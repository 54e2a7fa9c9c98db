"""`mqlab site` on the committed archive and on synthetic ones: what the pages show, that
it is what `mqlab ls`, `report` and `compare` show, unknown figures, bad input, links."""

from __future__ import annotations

import filecmp
import html
import json
import shutil
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

import pytest
from click.testing import CliRunner
from PIL import Image

from mqlab import cli
from mqlab.analysis import catalog
from mqlab.analysis.job import summarize_run
from mqlab.archive import layout
from mqlab.archive.formats import write_json
from mqlab.hosts.clocks import ClockEstimate, clock_section
from mqlab.published import reference
from mqlab.report import cells as shown
from mqlab.report import listing, markdown
from mqlab.report.plots import PERCENTILES_PNG, TIMELINE_PNG
from mqlab.report.site import SiteError, write_site
from mqlab.report.site.build import MARKER
from tests.report.archive import START_MS, write_tiny_run

from .conftest import Built
from .lab import BROKEN, HOSTILE, committed_run_ids
from .parse import Page, Row, Table, column, read_page

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def index(built: Built) -> Page:
    return read_page(built.out / "index.html")


def run_page(built: Built, run_id: str) -> Page:
    return read_page(built.out / "runs" / run_id / "index.html")


def row_of(table: Table, run_id: str) -> Row:
    found = [r for r in table.rows if r.attrs.get("data-run") == run_id]
    assert len(found) == 1, f"{len(found)} rows for {run_id}"
    return found[0]


def summary(run_dir: Path) -> dict[str, Any]:
    return json.loads((run_dir / layout.SUMMARY).read_text())


# -- the index ------------------------------------------------------------------------
def test_the_repository_has_a_committed_run() -> None:
    assert committed_run_ids(), "results/ holds no committed run"


def test_index_lists_every_readable_run_and_links_its_page(built: Built) -> None:
    lab = built.lab
    page = index(built)
    table = page.table("runs")
    expected = {*lab.committed, lab.complete.run_id, lab.unknowns.run_id}
    expected.add(lab.unsummarized.run_id)
    assert {r.attrs["data-run"] for r in table.rows} == expected
    assert built.result.runs == len(expected)
    for run_id in expected:
        assert (f'href="runs/{run_id}/index.html"') in page.text
        assert (built.out / "runs" / run_id / "index.html").is_file()
    assert BROKEN not in {r.attrs["data-run"] for r in table.rows}


def test_index_figures_are_those_of_ls(built: Built) -> None:
    """Run, broker, scenario, status, msgs/s, lost, undrained: `mqlab ls`'s own cells."""
    table = index(built).table("runs")
    for x in listing.list_runs(built.lab.results):
        if x.problem:
            continue
        ls = dict(zip(listing.COLUMNS, listing.cells(listing.row(x)), strict=True))
        row = row_of(table, x.info.run_id)
        for heading in ("Broker", "Scenario", "Status", "Send msgs/s", "Receive msgs/s"):
            assert column(table, row, heading).text == ls[heading], heading
        for heading in ("Lost", "Undrained"):
            assert column(table, row, heading).text == ls[heading], heading
        assert column(table, row, "Run").text.replace(" ", "") == x.info.run_id


def test_index_latencies_and_duplicated_are_the_summarys(built: Built) -> None:
    table = index(built).table("runs")
    for run_id in built.lab.committed:
        s = summary(built.lab.results / run_id)
        row = row_of(table, run_id)
        p95 = s["latency_us"]["processing_us"]["p95"]
        p99 = s["latency_us"]["processing_us"]["p99"]
        assert column(table, row, "p95 (ms)").text == f"{p95 / 1000:,.1f}"
        assert column(table, row, "p99 (ms)").text == f"{p99 / 1000:,.1f}"
        assert column(table, row, "p95 (ms)").attrs["data-sort"] == str(p95)
        dup = s["delivery"]["duplicated"]
        assert column(table, row, "Duplicated").text == f"{dup:,}"
        profile = json.loads((built.lab.results / run_id / "manifest.json").read_text())
        assert column(table, row, "Profile").text == profile["broker"]["profile"]


def test_unknown_figures_show_unknown_with_the_reason_never_zero(built: Built) -> None:
    run = built.lab.unknowns
    why = summary(run.run_dir)["unknown"]
    assert why.get("lost") and why.get("duplicated"), why
    table = index(built).table("runs")
    row = row_of(table, run.run_id)
    for heading, fig in (("Lost", "lost"), ("Duplicated", "duplicated")):
        cell = column(table, row, heading)
        assert cell.text == "unknown", heading
        assert why[fig] in cell.attrs["title"]
        assert cell.attrs["data-sort"] == ""  # sorts last, not as 0
    flags = column(table, row, "Flags").text
    assert f"unknown: {why['lost']}" in flags
    assert column(table, row, "Status").text == "partial"

    page = run_page(built, run.run_id)
    delivery = page.table("delivery")
    lost = next(r for r in delivery.rows if r.cells[0].text == "lost")
    messages = column(delivery, lost, "messages")
    assert messages.text == "unknown" and why["lost"] in messages.attrs["title"]
    assert f": {html.escape(why['lost'])}</li>" in page.text  # listed under the table
    share = column(delivery, lost, "share of sent")  # unknown too, for the same reason
    assert share.text == "unknown" and why["lost"] in share.attrs["title"]


def test_a_run_not_summarized_shows_dashes_and_how_to_summarize(built: Built) -> None:
    run = built.lab.unsummarized
    table = index(built).table("runs")
    row = row_of(table, run.run_id)
    for heading in ("Send msgs/s", "p95 (ms)", "Lost", "Duplicated"):
        assert column(table, row, heading).text == listing.NOT_SUMMARIZED, heading
    assert "not summarized" in column(table, row, "Flags").text
    text = run_page(built, run.run_id).text
    assert "mqlab summarize" in text
    assert "<img" not in text
    assert "tiny" in text  # its scenario is still shown


def test_an_unreadable_archive_is_left_out_with_a_warning(built: Built) -> None:
    (line,) = built.result.warnings
    assert str(built.lab.broken) in line and "manifest.json" in line
    assert "repair or remove" in line
    assert "could not be read" in index(built).text


# -- a run's page ---------------------------------------------------------------------
@pytest.mark.parametrize("name", [PERCENTILES_PNG, TIMELINE_PNG])
def test_run_pages_show_the_plots(built: Built, name: str) -> None:
    for run_id in [*built.lab.committed, built.lab.complete.run_id]:
        page = run_page(built, run_id)
        assert ("img", "src", name) in page.links
        png = built.out / "runs" / run_id / name
        assert png.read_bytes()[:8] == PNG_SIGNATURE
        with Image.open(png) as im:
            assert im.size[0] > 500 and im.size[1] > 300


@pytest.mark.parametrize("name", [PERCENTILES_PNG, TIMELINE_PNG])
def test_the_sites_plots_are_the_reports(built: Built, tmp_path: Path, name: str) -> None:
    """One plotting code path: the site's PNG is byte for byte the one `mqlab report`
    writes for the same run."""
    run = built.lab.complete
    copy = tmp_path / run.run_id
    shutil.copytree(run.run_dir, copy)
    markdown.report_run(copy)
    assert filecmp.cmp(copy / name, built.out / "runs" / run.run_id / name, shallow=False)


def test_run_page_shows_the_reports_figures_scenario_and_manifest(built: Built) -> None:
    for run_id in built.lab.committed:
        run_dir = built.lab.results / run_id
        page = run_page(built, run_id)
        mqperf = next(t for t in page.tables if t.header == list(shown.MQPERF_HEADER))
        row = catalog.read_run_table(run_dir, "runs").to_pylist()[0]
        assert [c.text for c in mqperf.rows[0].cells] == shown.mqperf_row(row)
        s = summary(run_dir)
        delivery = page.table("delivery")
        received = next(r for r in delivery.rows if r.cells[0].text == "received")
        assert received.cells[1].text == f"{s['delivery']['received']:,}"
        # the scenario as archived, and the manifest
        scenario_text = (run_dir / layout.SCENARIO).read_text()
        first_line = next(ln for ln in scenario_text.splitlines() if ln.strip())
        assert first_line.replace('"', "&quot;") in page.text
        manifest = json.loads((run_dir / layout.MANIFEST).read_text())
        assert manifest["run_id"] in page.text
        assert manifest["mqlab"]["git_commit"] in page.text
        # mqperf's published rows for the same configuration, labelled with the source
        assert "mqperf 2021 (published)" in page.text


def test_archive_text_is_escaped(built: Built) -> None:
    text = run_page(built, built.lab.unknowns.run_id).text
    assert HOSTILE not in text
    assert "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt; &amp; &lt;b&gt;" in text
    assert "<script>alert" not in text


# -- the comparison page ----------------------------------------------------------------
def test_compare_page_shows_runs_side_by_side_and_the_published_rows(built: Built) -> None:
    page = read_page(built.out / "compare.html")
    side = page.table("side")
    summarized = [*built.lab.committed, built.lab.complete.run_id, built.lab.unknowns.run_id]
    assert set(side.header[1:]) == set(summarized)
    lost = next(r for r in side.rows if r.cells[0].text == "lost")
    col = side.header.index(built.lab.unknowns.run_id)
    assert lost.cells[col].text == "unknown"
    assert built.lab.unsummarized.run_id in page.text  # named as left out

    ref = page.table("reference")
    published = [r for r in ref.rows if "published" in r.attrs.get("class", "")]
    brokers = {
        json.loads((built.lab.results / r / "manifest.json").read_text())["broker"]["name"]
        for r in summarized
    }
    same = [x for x in reference.load_reference() if x.broker in brokers]
    assert len(published) == len(same) > 0
    assert all("mqperf 2021 (published)" in r.cells[0].text for r in published)
    local = {r.attrs["data-run"] for r in ref.rows if "local" in r.attrs.get("class", "")}
    assert local == set(summarized)
    # the committed quickstart run (5 threads, 1s-2r) has a published row of its own
    matched = [r for r in published if "match" in r.attrs["class"]]
    [quickstart] = [r for r in built.lab.committed if "_quickstart_" in r]
    assert matched and any(quickstart in r.cells[-1].text for r in matched)
    assert reference.SOURCE.replace('"', "&quot;") in page.text


# -- links and files ----------------------------------------------------------------------
def test_every_link_is_relative_and_resolves(built: Built) -> None:
    pages = [built.out / "index.html", built.out / "compare.html"]
    pages += sorted((built.out / "runs").glob("*/index.html"))
    for path in pages:
        page = read_page(path)
        assert len(page.ids) == len(set(page.ids)), f"{path}: duplicate ids"
        for tag, attr, value in page.links:
            url = urlsplit(value)
            if url.scheme == "data" or value.startswith("#"):
                continue
            assert not url.scheme and not url.netloc and not value.startswith("/"), value
            target = (path.parent / unquote(url.path)).resolve()
            assert target.is_file(), f"{path}: {tag} {attr}={value} does not exist"
    assert (built.out / "site.js").stat().st_size > 0
    assert (built.out / "site.css").stat().st_size > 0
    assert (built.out / MARKER).is_file()


def test_rewriting_the_site_drops_runs_gone_from_the_results(built: Built, tmp_path: Path) -> None:
    out = tmp_path / "site"
    shutil.copytree(built.out, out)
    stale = out / "runs" / "gone"
    stale.mkdir()
    results = tmp_path / "results"
    results.mkdir()
    shutil.copytree(built.lab.complete.run_dir, results / built.lab.complete.run_id)
    result = write_site(results, out)
    assert result.runs == 1 and not result.warnings
    assert not stale.exists()
    assert [p.name for p in (out / "runs").iterdir()] == [built.lab.complete.run_id]


# -- bad input ------------------------------------------------------------------------
def test_no_results_directory_is_a_one_line_error(tmp_path: Path) -> None:
    with pytest.raises(SiteError, match="no such results directory"):
        write_site(tmp_path / "nope", tmp_path / "site")
    res = CliRunner().invoke(
        cli.main, ["site", "--results", str(tmp_path / "nope"), "--out", str(tmp_path / "s")]
    )
    assert res.exit_code != 0
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and str(tmp_path / "nope") in lines[0] and "--results" in lines[0]
    assert not (tmp_path / "s").exists()


def test_an_empty_results_directory_is_an_error(tmp_path: Path) -> None:
    (tmp_path / "results").mkdir()
    with pytest.raises(SiteError, match="no run archives"):
        write_site(tmp_path / "results", tmp_path / "site")


def test_only_unreadable_archives_is_an_error_naming_the_file(built: Built, tmp_path: Path) -> None:
    results = tmp_path / "results"
    results.mkdir()
    shutil.copytree(built.lab.broken, results / BROKEN)
    with pytest.raises(SiteError, match=f"{BROKEN}: manifest.json"):
        write_site(results, tmp_path / "site")


def test_a_folder_not_written_by_site_is_not_overwritten(built: Built, tmp_path: Path) -> None:
    out = tmp_path / "mine"
    out.mkdir()
    (out / "notes.txt").write_text("keep")
    with pytest.raises(SiteError, match="not written by `mqlab site`"):
        write_site(built.lab.results, out)
    assert (out / "notes.txt").read_text() == "keep"


def test_the_command_prints_the_index_and_warns_about_left_out_runs(
    built: Built, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    res = CliRunner().invoke(
        cli.main, ["site", "--results", str(built.lab.results), "--out", str(out)]
    )
    assert res.exit_code == 0, (res.output, res.exception)
    assert res.stdout.strip() == str((out / "index.html").resolve())
    warnings = [ln for ln in res.stderr.splitlines() if ln.startswith("warning:")]
    assert len(warnings) == 1 and str(built.lab.broken) in warnings[0]


def test_the_default_out_is_under_dot_mqlab(
    built: Built, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    res = CliRunner().invoke(cli.main, ["site", "--results", str(built.lab.results)])
    assert res.exit_code == 0, (res.output, res.exception)
    assert res.stdout.strip() == str((tmp_path / ".mqlab" / "site" / "index.html").resolve())


# -- a priced run on several hosts --------------------------------------------------------
def _priced_multi_host(results: Path, budget_ms: float) -> Path:
    """A tiny run on a lab with a price, its sender and receiver on two hosts whose clock
    offsets were measured (as tests/report/test_clock_cost_report.py writes it)."""
    run = write_tiny_run(results, start_ms=START_MS + 3_600_000)
    path = run.run_dir / layout.MANIFEST
    doc = json.loads(path.read_text())
    est = {
        "client-1": ClockEstimate(0.8, 0.11, 0.22, 40),
        "client-2": ClockEstimate(-2.5, 0.07, 0.14, 40),
    }
    doc["clock"] = clock_section(
        est, est, {"sender-00": "client-1"}, {"receiver-00": "client-2"}, budget_ms
    )
    doc["lab"] = {"kind": "aws", "name": "eu-3x", "price_per_hour_usd": 1.53, "hosts": {}}
    doc["cluster"]["target"] = "aws"
    write_json(path, doc)
    summarize_run(run.run_dir, window_s=2.0)
    return run.run_dir


def test_a_priced_run_on_several_hosts_shows_its_cost_and_clocks(tmp_path: Path) -> None:
    run_dir = _priced_multi_host(tmp_path / "results", budget_ms=0.01)
    out = tmp_path / "site"
    write_site(tmp_path / "results", out)
    s = summary(run_dir)
    table = read_page(out / "index.html").table("runs")
    row = row_of(table, run_dir.name)
    (x,) = listing.list_runs(tmp_path / "results")
    ls = dict(zip(listing.COLUMNS, listing.cells(listing.row(x)), strict=True))
    assert column(table, row, "Cost").text == ls["Cost"] != ""
    assert "over budget" in column(table, row, "Flags").text
    text = run_page_at(out, run_dir.name).text
    assert "<h2>Clocks</h2>" in text
    assert f"Clock error bound: {s['clock_bound_ms']:g} ms (over the budget 0.01 ms)" in text
    assert "client-1" in text and "+0.800" in text
    assert "eu-3x" in text and "$1.53/h" in text


def run_page_at(out: Path, run_id: str) -> Page:
    return read_page(out / "runs" / run_id / "index.html")
