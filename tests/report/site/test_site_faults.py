"""`mqlab site` on runs with faults: a run page's faults table and the index's durability
matrix, over a copy of the committed durability matrix (results/durability-matrix/).
Every expected cell is computed here from the run's summary.json and manifest.json, not
with the site's or the report's code; runs whose fault figures cannot be read, and runs
without faults, still render."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from mqlab.archive import layout
from mqlab.report.site import SiteResult, write_site
from tests.fixtures.committed import committed_runs, copy_committed, tracked

from .conftest import Built
from .lab import REPO
from .parse import Page, Row, Table, column, read_page

MATRIX = REPO / "results" / "durability-matrix"
MATRIX_RUNS = committed_runs("results/durability-matrix/*")
FAULTS_PARQUET = Path("summary") / "faults.parquet"
# the faults table's headings and the summary.json field under each
FAULT_COLUMNS = (
    ("fault", "label"),
    ("from", "start_ms"),
    ("to", "end_ms"),
    ("no sends confirmed", "unavailable_send_s"),
    ("nothing received", "unavailable_receive_s"),
    ("send p99 back", "send_p99_recovered_s"),
    ("processing p99 back", "processing_p99_recovered_s"),
    ("failed sends", "failed"),
    ("sent in it", "sent"),
    ("of them lost", "lost"),
    ("recovered", "recovered"),
    ("duplicated", "duplicated"),
)
CHECKER = ("lost", "unexpected", "duplicated", "recovered")


@dataclass
class Faulted:
    results: Path
    out: Path
    result: SiteResult
    run_ids: list[str]  # oldest first, as the index lists them


@pytest.fixture(scope="module")
def faulted(tmp_path_factory: pytest.TempPathFactory) -> Faulted:
    root = tmp_path_factory.mktemp("site-faults")
    results = root / "results"
    for run in MATRIX_RUNS:  # a copy: the site never writes into results/
        copy_committed(run, results / run.name)
    run_ids = sorted(p.name for p in layout.find_runs(results))
    out = root / "site"
    return Faulted(results, out, write_site(results, out), run_ids)


def _json(path: Path) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(path.read_text())
    return doc


def _summary(run_dir: Path) -> dict[str, Any]:
    return _json(run_dir / layout.SUMMARY)


def _origin_ms(run_dir: Path) -> int:
    """The senders' start, from the manifest: fault times count from it."""
    start: int = _json(run_dir / layout.MANIFEST)["measure"]["start_ms"]
    return start


def _page(out: Path, run_id: str) -> Page:
    return read_page(out / "runs" / run_id / "index.html")


def _seconds(v: int | None) -> str:
    return "unknown" if v is None else f"{v:,} s"


def _count(v: int | None) -> str:
    return "unknown" if v is None else f"{v:,}"


def _at(ms: int | None, origin: int) -> str:
    return "end of run" if ms is None else f"{(ms - origin) / 1000:,.1f} s"


def expected_fault_row(f: dict[str, Any], origin: int) -> list[str]:
    """A fault of summary.json as the report words it."""
    out = []
    for _heading, key in FAULT_COLUMNS:
        v = f.get(key)
        if key == "label":
            out.append(str(v))
        elif key.endswith("_ms"):
            out.append(_at(v, origin))
        elif key.endswith("_s"):
            out.append(_seconds(v))
        else:
            out.append(_count(v))
    return out


def _kind(f: dict[str, Any], behind: bool = False) -> str:
    """The matrix column of a fault; a run whose receivers were behind (its summary's
    saturation) has columns of its own, marked so."""
    kind = f"partition: {f['kind']}" if f["action"] == "partition" else str(f["action"])
    return kind + (" (receivers behind)" if behind else "")


def expected_matrix_cell(faults: list[dict[str, Any]], kind: str, behind: bool = False) -> str:
    of_kind = [f for f in faults if _kind(f, behind) == kind]
    if not of_kind:
        return "–"
    return " / ".join(
        f"lost {_count(f['lost'])} · duplicated {_count(f['duplicated'])} · "
        f"{_seconds(f['unavailable_send_s'])}"
        for f in of_kind
    )


def _percent(x: float) -> str:
    return "0 %" if x == 0 else f"{x * 100:.3g} %"


def _row(table: Table, first: str) -> Row:
    found = [r for r in table.rows if r.cells[0].text == first]
    assert len(found) == 1, f"{len(found)} rows named {first!r}"
    return found[0]


# -- a run's page -----------------------------------------------------------------------
def test_the_committed_durability_matrix_has_runs_with_faults() -> None:
    runs = MATRIX_RUNS
    assert len(runs) >= 2
    assert all(_summary(r)["faults"] for r in runs)


def test_a_faulted_runs_page_has_the_reports_faults_table(faulted: Faulted) -> None:
    assert faulted.result.runs == len(faulted.run_ids) and not faulted.result.warnings
    for run_id in faulted.run_ids:
        run_dir = faulted.results / run_id
        faults = _summary(run_dir)["faults"]
        table = _page(faulted.out, run_id).table("faults")
        assert table.header == [h for h, _ in FAULT_COLUMNS]
        assert len(table.rows) == len(faults) > 0
        origin = _origin_ms(run_dir)
        for row, f in zip(table.rows, faults, strict=True):
            assert [c.text for c in row.cells] == expected_fault_row(f, origin), run_id
            for cell, (heading, key) in zip(row.cells, FAULT_COLUMNS, strict=True):
                if f[key] is None and key != "end_ms":
                    # unknown as the site shows it: marked, with the reason on hover
                    assert cell.attrs.get("class") == "unknown", (run_id, heading)
                    assert cell.attrs["title"].startswith("unknown: "), (run_id, heading)


def test_the_faults_table_shows_an_unknown_figure_as_unknown(faulted: Faulted) -> None:
    """The committed matrix has at least one figure the summary could not compute (a p99
    that never had a level before its fault, or never came back)."""
    unknown = [
        (run_id, f["label"], key)
        for run_id in faulted.run_ids
        for f in _summary(faulted.results / run_id)["faults"]
        for _h, key in FAULT_COLUMNS
        if key != "end_ms" and f[key] is None
    ]
    assert unknown, "no unknown fault figure in the committed matrix: pick another check"
    run_id, label, key = unknown[0]
    table = _page(faulted.out, run_id).table("faults")
    heading = next(h for h, k in FAULT_COLUMNS if k == key)
    cell = column(table, _row(table, label), heading)
    assert cell.text == "unknown" and cell.attrs["data-sort"] == ""


def test_the_faults_note_states_the_runs_longest_gaps(faulted: Faulted) -> None:
    for run_id in faulted.run_ids:
        gaps = _summary(faulted.results / run_id)["longest_gap_s"]
        text = _page(faulted.out, run_id).text
        assert (
            f"Longest stretch without a confirmed send: {_seconds(gaps['send'])}; "
            f"without a received message: {_seconds(gaps['receive'])}."
        ) in text


def test_a_faulted_runs_page_shows_the_timeline_with_its_faults(faulted: Faulted) -> None:
    for run_id in faulted.run_ids:
        page = _page(faulted.out, run_id)
        assert ("img", "src", "timeline.png") in page.links
        assert (faulted.out / "runs" / run_id / "timeline.png").is_file()


def test_the_delivery_table_has_the_checkers_figures_and_shares(faulted: Faulted) -> None:
    for run_id in faulted.run_ids:
        s = _summary(faulted.results / run_id)
        delivery = _page(faulted.out, run_id).table("delivery")
        sent = s["delivery"]["sent"]
        for k in CHECKER:
            row = _row(delivery, k)
            n = s["delivery"][k]
            assert column(delivery, row, "messages").text == f"{n:,}"
            share = s["delivery_fractions"][k]
            assert share == pytest.approx(n / sent)  # summary.json agrees with itself
            assert column(delivery, row, "share of sent").text == _percent(share)
        # a figure that is not a checker's has no share
        assert column(delivery, _row(delivery, "received"), "share of sent").text == ""


# -- the index --------------------------------------------------------------------------
def test_the_durability_page_has_the_matrix(faulted: Faulted) -> None:
    faults = {r: _summary(faulted.results / r)["faults"] for r in faulted.run_ids}
    behind = {
        r: bool(_summary(faulted.results / r)["saturation"]["receivers_behind"])
        for r in faulted.run_ids
    }
    kinds: list[str] = []
    for run_id in faulted.run_ids:
        for f in faults[run_id]:
            if _kind(f, behind[run_id]) not in kinds:
                kinds.append(_kind(f, behind[run_id]))
    kinds.sort(key=lambda k: k.endswith("(receivers behind)"))  # those columns last
    matrix = read_page(faulted.out / "durability.html").table("durability")
    assert matrix.header == ["run", "broker", "profile", *kinds]
    assert [r.attrs["data-run"] for r in matrix.rows] == faulted.run_ids  # one row per run
    for row in matrix.rows:
        run_id = row.attrs["data-run"]
        manifest = _json(faulted.results / run_id / layout.MANIFEST)
        assert column(matrix, row, "broker").text == manifest["broker"]["name"]
        assert column(matrix, row, "profile").text == manifest["broker"]["profile"]
        assert column(matrix, row, "run").text.replace(" ", "") == run_id
        for kind in kinds:
            want = expected_matrix_cell(faults[run_id], kind, behind[run_id])
            assert column(matrix, row, kind).text == want


def test_the_matrix_cells_are_the_sweep_reports(faulted: Faulted) -> None:
    """The committed sweep report's matrix and the site's say the same, cell for cell."""
    (sweep,) = tracked("results/durability-matrix/reports/sweep-*/sweep-report.md")
    lines = sweep.read_text().split("## Durability matrix", 1)[1].splitlines()
    rows = [
        [c.strip() for c in ln.strip().strip("|").split("|")] for ln in lines if ln.startswith("|")
    ]
    header, body = rows[0], rows[2:]
    matrix = read_page(faulted.out / "durability.html").table("durability")
    assert matrix.header[1:] == header
    assert [[c.text for c in r.cells[1:]] for r in matrix.rows] == body


def test_runs_without_faults_have_no_faults_section_and_no_matrix(built: Built) -> None:
    lab = built.lab
    for run_id in [*lab.committed, lab.complete.run_id, lab.unknowns.run_id]:
        if (lab.results / run_id / layout.SUMMARY).is_file():
            assert _summary(lab.results / run_id)["faults"] == [], run_id
        page = _page(built.out, run_id)
        assert "faults" not in page.ids, run_id  # the report's section says so, no table
        assert "None injected." in page.text, run_id
    matrix = read_page(built.out / "durability.html")
    assert "durability" not in matrix.ids
    assert "No run under the results folder injected faults." in matrix.text


# -- fault figures that cannot be read ----------------------------------------------------
def test_runs_whose_fault_figures_cannot_be_read_still_render(tmp_path: Path) -> None:
    """A faults table that is unreadable, one that is missing (summarized before fault
    figures), and a run from before faults (no table, no fault log)."""
    results = tmp_path / "results"
    results.mkdir()
    first, second, third = (p.name for p in MATRIX_RUNS[:3])
    for run_id in (first, second, third):
        copy_committed(MATRIX / run_id, results / run_id)
    (results / first / FAULTS_PARQUET).write_bytes(b"not parquet")
    (results / second / FAULTS_PARQUET).unlink()
    (results / third / FAULTS_PARQUET).unlink()
    manifest = json.loads((results / third / layout.MANIFEST).read_text())
    del manifest["faults"]
    (results / third / layout.MANIFEST).write_text(json.dumps(manifest, indent=1))

    out = tmp_path / "site"
    result = write_site(results, out)
    assert result.runs == 3 and not result.warnings

    for run_id, why in ((first, "unreadable"), (second, "no faults table")):
        page = _page(out, run_id)
        table = page.table("faults")
        # the faults of the manifest's log, each figure unknown with the reason
        labels = [f["label"] for f in _summary(results / run_id)["faults"]]
        assert [r.cells[0].text for r in table.rows] == labels
        origin = _origin_ms(results / run_id)
        for row, f in zip(table.rows, _summary(results / run_id)["faults"], strict=True):
            assert row.cells[1].text == _at(f["start_ms"], origin)
            for cell in row.cells[3:]:
                assert cell.text == "unknown" and cell.attrs["class"] == "unknown"
                assert why in cell.attrs["title"], cell.attrs["title"]
        assert "Fault figures unknown" in page.text
        assert page.table("delivery").rows  # the rest of the page is there

    third_page = _page(out, third)
    assert "faults" not in third_page.ids  # no table: the section says the figures are unknown
    assert third_page.table("delivery").rows

    matrix = read_page(out / "durability.html").table("durability")
    assert [r.attrs["data-run"] for r in matrix.rows] == [first, second]
    kinds = []
    for f in _summary(results / first)["faults"] + _summary(results / second)["faults"]:
        if _kind(f) not in kinds:
            kinds.append(_kind(f))
    assert matrix.header == ["run", "broker", "profile", *kinds]
    for row in matrix.rows:
        assert all(c.text == "unknown" and c.attrs["class"] == "unknown" for c in row.cells[3:])
