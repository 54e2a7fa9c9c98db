"""The site's index of runs (with the durability matrix), and what the pages share;
a run's page is :mod:`run_page`, the comparison page :mod:`compare_page`.

Figures come from the code of the other commands, never computed here: the index's
columns are `mqlab ls`'s (:func:`listing.row` and :func:`listing.cells`, over each run's
``summary.json``) plus the summary's processing p95/p99 and duplicated; a run page renders
the report's own sections (:func:`run_report.run_sections`, the model ``report.md`` is
written from); the index's durability matrix has the sweep report's cells
(:func:`sweep.matrix_cells`); the comparison page shows `mqlab compare`'s figures
(:data:`compare.FIGURES`) and its reference matching (:func:`reference.against_reference`).
A figure the summary could not compute is "unknown" with the summary's reason.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from mqlab.analysis import faults as fault_figures
from mqlab.report import cells as shown
from mqlab.report import listing, sweep, unknown
from mqlab.report.site.experiments import Experiment
from mqlab.report.site.gather import SiteRun
from mqlab.report.site.html import (
    NOT_SUMMARIZED,
    breakable,
    esc,
    figure,
    filter_box,
    not_summarized,
    page,
    table,
    td,
    tr,
)

# the summary's figures that the index shows as columns, in its order
INDEX_FIGURES = ("send_msgs_per_s", "receive_msgs_per_s", "lost", "duplicated", "undrained")


# -- shared ---------------------------------------------------------------------------
def ms_cell(us: float | int | None, why: str | None = None) -> str:
    """A latency in µs as a cell in ms, as the report formats it."""
    return figure(us, ",.1f", why, scale=1 / 1000)


def _summary_reasons(r: SiteRun) -> dict[str, str]:
    return unknown.reasons(r.summary or {})


def _summary_figure(r: SiteRun, *keys: str) -> Any:
    doc: Any = r.summary or {}
    for k in keys:
        doc = doc.get(k) if isinstance(doc, dict) else None
    return doc


def flags(r: SiteRun) -> list[tuple[str, str | None]]:
    """(text, detail) of what a reader of the run's figures should know about: unknown
    figures with the summary's reason, input problems, sender lag, latencies out of
    range, a clock error bound over its budget, failed sends."""
    s = r.summary
    if s is None:
        return [("not summarized", f"run `mqlab summarize {r.path}`")]
    out: list[tuple[str, str | None]] = []
    by_reason: dict[str, list[str]] = {}
    for fig, why in unknown.reasons(s).items():
        by_reason.setdefault(why, []).append(fig)
    for why, figs in by_reason.items():
        # the index's own columns by name, the others counted (all of them on hover)
        named = [f for f in INDEX_FIGURES if f in figs] or figs[:1]
        more = len(figs) - len(named)
        text = ", ".join(named) + (f" and {more} more" if more else "")
        out.append((f"{text} unknown: {why}", "unknown: " + ", ".join(figs)))
    problems = s.get("problems") or {}
    bad, missing = problems.get("bad_lines") or 0, problems.get("missing_files") or 0
    if bad or missing:
        out.append((f"input problems: {bad:,} bad line(s), {missing:,} missing file(s)", None))
    lag = s.get("sender_lag_ms_max")
    if lag:
        out.append(
            (
                f"senders fell {lag:,} ms behind",
                "latencies count from the intended send time (no coordinated omission)",
            )
        )
    oor = s.get("latency_out_of_range") or {}
    clamped = sum(v or 0 for m in oor.values() if isinstance(m, dict) for v in m.values())
    if clamped:
        out.append(
            (f"{clamped:,} latency value(s) out of range", "clamped at 0 or 1 h: see the run")
        )
    if s.get("clock_within_budget") is False:
        out.append((f"clock error bound {s.get('clock_bound_ms')} ms over budget", None))
    failed = (s.get("delivery") or {}).get("failed")
    if failed:
        out.append((f"{failed:,} failed send(s)", None))
    if s.get("stand_in"):
        out.append(("stand-in", f"{s['stand_in']} served, not the real system"))
    sat = s.get("saturation") or {}
    if sat.get("client_bound"):
        out.append(("client-bound", "; ".join(sat.get("client_bound_why") or [])))
    if sat.get("receivers_behind"):
        out.append(("receivers behind", sat.get("receivers_behind_why")))
    return out


def _flags_cell(r: SiteRun) -> str:
    fl = flags(r)
    spans = []
    for text, detail in fl:
        title = f' title="{esc(detail)}"' if detail else ""
        spans.append(f'<span class="flag"{title}>{esc(text)}</span>')
    return td(" ".join(spans), sort=len(fl), raw=True, cls="flags")


def run_link(r: SiteRun, root: str = "") -> str:
    return f'<a href="{esc(root + r.href)}">{breakable(r.run_id)}</a>'


def fault_rows(r: SiteRun) -> list[dict[str, Any]]:
    """The run's ``faults`` rows; when they are unknown, the faults of its manifest's log
    (paired into windows as the summary pairs them), without figures."""
    return r.faults if r.faults is not None else fault_figures.windows(r.fault_log)


def threads_cell(st: int, rt: int) -> str:
    return shown.threads_label({"sender_threads": st, "receiver_threads": rt})


# -- index ----------------------------------------------------------------------------
INDEX_COLUMNS: tuple[str | tuple[str, str], ...] = (
    ("Pick", ' class="nosort"'),
    "Run",
    "Broker",
    "Profile",
    "Scenario",
    "Status",
    "Send msgs/s",
    "Receive msgs/s",
    "p95 (ms)",
    "p99 (ms)",
    "Lost",
    "Duplicated",
    "Undrained",
)


def index_row(r: SiteRun, priced: bool, root: str = "", experiment: str | None = None) -> str:
    """A run's row of a runs table; ``experiment`` the HTML of its experiment's cell
    (the index has that column), ``root`` the path to the site's root."""
    d = r.ls
    c = listing.cells(d)  # exactly `mqlab ls`'s cells: run, broker, scenario, status, ...
    run, _folder, broker, scenario, status, send, receive, lost, undrained, cost = c
    summarized = d["summarized"]
    why_not = f"not summarized: run `mqlab summarize {r.path}`"
    reasons = _summary_reasons(r)
    profile = str(r.listed.info.scenario.get("profile", "?"))

    def ls_fig(text: str, value: Any, fig: str) -> str:
        if not summarized:
            return not_summarized(why_not)
        if value is None:
            return figure(None, why=d["unknown"].get(fig) or reasons.get(fig))
        return td(text, sort=value, cls="num")

    def latency(p: str) -> str:
        if not summarized:
            return not_summarized(why_not)
        us = _summary_figure(r, "latency_us", "processing_us", p)
        return ms_cell(us, reasons.get(f"processing_us_{p}"))

    box = (
        f'<input type="checkbox" class="pick"{" " if r.run else " disabled "}'
        f'value="{esc(r.run_id)}" aria-label="compare {esc(r.run_id)}">'
    )
    cells = [
        td(box, raw=True),
        td(run_link(r, root), sort=run, raw=True, cls="run"),
        *([td(experiment, raw=True, cls="experiment")] if experiment is not None else []),
        td(broker),
        td(profile),
        td(scenario),
        td(status, cls=f"status status-{status}" if status.isalpha() else "status"),
        ls_fig(send, d["send_msgs_per_s"], "send_msgs_per_s"),
        ls_fig(receive, d["receive_msgs_per_s"], "receive_msgs_per_s"),
        latency("p95"),
        latency("p99"),
        ls_fig(lost, d["lost"], "lost"),
        (
            not_summarized(why_not)
            if not summarized
            else figure(_summary_figure(r, "delivery", "duplicated"), why=reasons.get("duplicated"))
        ),
        ls_fig(undrained, d["undrained"], "undrained"),
    ]
    if priced:
        cells.append(td(cost, cls="num"))
    cells.append(_flags_cell(r))
    return tr(cells, data_run=r.run_id)


def runs_header(priced: bool, experiment: bool = False) -> list[str | tuple[str, str]]:
    cols = list(INDEX_COLUMNS)
    if experiment:
        cols.insert(2, "Experiment")
    return [*cols, *(("Cost",) if priced else ()), "Flags"]


def _experiments_table(experiments: Sequence[Experiment]) -> str:
    rows = [
        tr(
            [
                td(f'<a href="{esc(ex.href)}">{esc(ex.title)}</a>', sort=i, raw=True),
                td(ex.folder),
                td(ex.family),
                td(str(len(ex.runs)), sort=len(ex.runs), cls="num"),
                td(", ".join(ex.brokers)),
                td(ex.reference or ""),
                td("yes" if ex.own else ""),
            ],
            data_experiment=ex.slug,
        )
        for i, ex in enumerate(experiments)
    ]
    header = (
        "Experiment",
        "Folder",
        "Scenario family",
        "Runs",
        "Brokers",
        "Published set",
        "Yours",
    )
    return f"""<h2 id="experiments-heading">Experiments</h2>
<p>{len(experiments)} experiment(s): the runs grouped by the folder they sit in and their
scenario family (the published set a scenario reproduces), your own runs (those git does
not track) first. Each has its page: its runs, its sweep, and the published figures beside
them.</p>
{filter_box("experiments", "e.g. mqperf", "experiments")}
<div class="wide">{table(header, rows, table_id="experiments")}</div>"""


def index_page(experiments: Sequence[Experiment], results_dir: str, warnings: Sequence[str]) -> str:
    runs = [r for ex in experiments for r in ex.runs]
    priced = any(r.ls.get("price_per_hour_usd") is not None for r in runs)
    left_out = ""
    if warnings:
        items = "".join(f"<li>{esc(w)}</li>" for w in warnings)
        left_out = (
            f'<details class="warnings"><summary>{len(warnings)} run archive(s) could not be '
            f"read and are left out</summary><ul>{items}</ul></details>"
        )
    rows = [
        index_row(r, priced, experiment=f'<a href="{esc(ex.href)}">{esc(ex.title)}</a>')
        for ex in experiments
        for r in ex.runs
    ]
    body = f"""<h1>Runs</h1>
<p>{len(runs)} run(s) from <code>{esc(results_dir)}</code> and the folders under it.</p>
{left_out}
{_experiments_table(experiments)}
<h2>Every run</h2>
<p>By experiment (as above), oldest first within one; click a column heading to sort, type
in the box to filter. Figures are those of <code>mqlab ls</code>
and the run's summary: <em>unknown</em> where the summary could not compute a figure
(the reason is in the flags and on hover), <em>{NOT_SUMMARIZED}</em> where the run is not
summarized. p95 and p99 are of the processing latency (from each message's intended send
time to its receipt) over the measured period. The runs that injected faults are on
<a href="durability.html">the durability matrix</a>.</p>
{filter_box("runs", "e.g. nats complete", "runs")}
<p><button type="button" id="compare-picked" disabled>Compare the runs ticked</button>
<a href="compare.html">compare all runs, and with mqperf 2021</a></p>
<div class="wide">{table(runs_header(priced, True), rows, table_id="runs")}</div>"""
    return page("Runs", body, current="Runs")


def durability(
    runs: Sequence[SiteRun], root: str = "", table_id: str = "durability", title: str = ""
) -> str:
    """The sweep report's durability matrix over the summarized runs that had faults: a
    row per run, a column per kind of fault; nothing when none had one."""
    faulted = [r for r in runs if r.run is not None and r.had_faults]
    columns = sweep.matrix_columns([(r.run, fault_rows(r)) for r in faulted])
    if not columns:
        return ""
    rows = []
    for r in faulted:
        run = r.run
        assert run is not None
        cells = [
            td(run_link(r, root), sort=r.run_id, raw=True, cls="run"),
            td(run["broker"]),
            td(run["profile"]),
        ]
        for text in sweep.matrix_cells(r.faults, columns, run):
            if r.faults is None:
                cells.append(figure(None, why=r.faults_unknown))
            elif text == "–":
                cells.append(td(text, title="no fault of this kind in this run"))
            else:
                cells.append(td(text, cls="fault"))
        rows.append(tr(cells, data_run=r.run_id))
    heading = title or "Durability matrix"
    return f"""<h2 id="{esc(table_id)}-matrix">{esc(heading)}</h2>
<p>The runs that injected faults (runs without faults are not listed), a column per
kind of fault. {sweep.MATRIX_NOTE} (several faults of a kind are separated by /). A
run's page has every figure of every fault.</p>
<div class="wide">{table(("run", "broker", "profile", *columns), rows, table_id=table_id)}</div>
"""
