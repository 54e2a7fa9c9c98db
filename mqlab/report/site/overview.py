"""The site's broker overview (``brokers.html``: for each broker its best throughput,
its latency at fixed rates and its rows of the durability matrix, over every run of the
results folder) and the durability matrix as a page (``durability.html``)."""

from __future__ import annotations

from collections.abc import Sequence

from mqlab.report import unknown
from mqlab.report.site.gather import SiteRun
from mqlab.report.site.html import esc, figure, filter_box, page, table, td, tr
from mqlab.report.site.pages import durability, ms_cell, run_link


def fixed_rate(r: SiteRun) -> float | None:
    """The rate the run's scenario sends at (msgs/s per sender thread), None when it
    sends as fast as it can (a rate of 0)."""
    workload = r.listed.info.scenario.get("workload") or {}
    rate = workload.get("rate_per_s") if isinstance(workload, dict) else None
    return float(rate) if isinstance(rate, int | float) and rate > 0 else None


def best(runs: Sequence[SiteRun], field: str) -> SiteRun | None:
    """The summarized run with the highest ``field`` (unknown figures left out)."""
    known = [r for r in runs if r.run is not None and r.run.get(field) is not None]
    return max(known, key=lambda r: r.run[field] if r.run else 0, default=None)


def _best_cell(r: SiteRun | None, field: str) -> list[str]:
    if r is None or r.run is None:
        return [figure(None, why="no summarized run with this figure"), td("")]
    return [figure(r.run[field], ",.0f"), td(run_link(r), sort=r.run_id, raw=True, cls="run")]


def _throughput(by_broker: dict[str, list[SiteRun]]) -> str:
    rows = []
    for broker, runs in by_broker.items():
        summarized = [r for r in runs if r.run is not None]
        rows.append(
            tr(
                [
                    td(f'<a href="#broker-{esc(broker)}">{esc(broker)}</a>', sort=broker, raw=True),
                    td(str(len(runs)), sort=len(runs), cls="num"),
                    td(str(len(summarized)), sort=len(summarized), cls="num"),
                    *_best_cell(best(runs, "send_msgs_per_s"), "send_msgs_per_s"),
                    *_best_cell(best(runs, "receive_msgs_per_s"), "receive_msgs_per_s"),
                ],
                data_broker=broker,
            )
        )
    header = (
        "broker",
        "runs",
        "summarized",
        "best send msgs/s",
        "its run",
        "best receive msgs/s",
        "its run",
    )
    return f"""<h2 id="best">Best throughput</h2>
<p>The highest send and receive msgs/s of any summarized run of each broker (whatever its
scenario: the run's page says how it was run; a stand-in or client-bound mark is in its
flags).</p>
{filter_box("brokers", "e.g. kafka", "brokers")}
<div class="wide">{table(header, rows, table_id="brokers")}</div>"""


def _rate_rows(broker: str, runs: Sequence[SiteRun]) -> list[str]:
    out = []
    for r in runs:
        rate, run = fixed_rate(r), r.run
        if rate is None or run is None:
            continue
        cells: list[str] = [
            td(run_link(r, ""), sort=r.run_id, raw=True, cls="run"),
            td(broker),
            td(str(run["profile"])),
            td(f"{rate:,g}", sort=rate, cls="num"),
            td(f"{run['message_bytes']:,}", sort=run["message_bytes"], cls="num"),
            figure(run["receive_msgs_per_s"], ",.0f", unknown.why(run, "receive_msgs_per_s")),
        ]
        for p in ("p50", "p95", "p99"):
            key = f"processing_us_{p}"
            cells.append(ms_cell(run.get(key), unknown.why(run, key)))
        out.append(tr(cells, data_run=r.run_id, data_broker=broker))
    return out


def _broker_section(broker: str, runs: Sequence[SiteRun]) -> str:
    rates = _rate_rows(broker, runs)
    slug = esc(broker)
    header = (
        "run",
        "broker",
        "profile",
        "rate msgs/s (per thread)",
        "message bytes",
        "receive msgs/s",
        "p50 (ms)",
        "p95 (ms)",
        "p99 (ms)",
    )
    rate_html = (
        f'<div class="wide">{table(header, rates, table_id=f"rates-{broker}")}</div>'
        if rates
        else "<p class=note>No run at a fixed rate.</p>"
    )
    matrix = durability(runs, table_id=f"durability-{broker}", title=f"{broker}: faults")
    return (
        f'<h2 id="broker-{slug}">{slug}</h2>'
        f"<p>{len(runs)} run(s). Latency at fixed rates: processing latency over the measured "
        "period of each run whose scenario sends at a fixed rate.</p>"
        + rate_html
        + (matrix or "<p class=note>No run of this broker injected faults.</p>")
    )


def brokers_page(runs: Sequence[SiteRun]) -> str:
    by_broker: dict[str, list[SiteRun]] = {}
    for r in sorted(runs, key=lambda r: r.ls["broker"]):
        by_broker.setdefault(r.ls["broker"], []).append(r)
    body = (
        f"<h1>Brokers</h1><p>{len(by_broker)} broker(s) over {len(runs)} run(s).</p>"
        + _throughput(by_broker)
        + "".join(_broker_section(b, rs) for b, rs in by_broker.items())
    )
    return page("Brokers", body, current="Brokers")


def durability_page(runs: Sequence[SiteRun]) -> str:
    matrix = durability(runs)
    body = "<h1>Durability matrix</h1>" + (
        matrix or "<p class=note>No run under the results folder injected faults.</p>"
    )
    return page("Durability matrix", body, current="Durability")
