"""A run against mqperf 2021 (the site's run page): the run's figures next to the
published rows of the same broker, threads and nodes, as a model section
(:mod:`mqlab.report.model`)."""

from __future__ import annotations

from mqlab.published import reference
from mqlab.report import unknown
from mqlab.report.model import Block, Cell, Link, Paragraph, Section, Table

REFERENCE = "mqperf-2021"
REFERENCE_LABEL = "mqperf 2021 (published)"
HEADER = ("source", "send msgs/s", "receive msgs/s", "processing p95 (ms)", "send p95 (ms)")


def _figure(run: dict[str, object], key: str) -> Cell:
    value = run.get(key)
    if not isinstance(value, int | float):
        return Cell(unknown.UNKNOWN, sort="", why=unknown.why(run, key) or "not in the summary")
    return Cell(f"{value:,.0f}", sort=value)


def _ms(us: object, why: str | None = None) -> Cell:
    """A latency in µs as milliseconds, as the report formats it."""
    if not isinstance(us, int | float):
        return Cell(unknown.UNKNOWN, sort="", why=why or "not in the summary")
    return Cell(unknown.show(us / 1000, ",.1f"), sort=us)


def published_row(x: reference.ReferenceRow) -> list[str | Cell]:
    """A published row's cells: its label (the mapping's caveat on hover) and figures."""
    label = f"{REFERENCE_LABEL}: {x.system}" + (f" ({x.table})" if x.table != "main" else "")
    p95 = x.processing_latency_p95_ms
    proc = (
        Cell("fell behind", sort=p95, hint=f"receivers fell behind (published as {p95:g} ms)")
        if x.fell_behind
        else Cell(f"{p95:,.1f}", sort=p95)
    )
    return [
        Cell(label, hint=x.approximate),
        Cell(f"{x.send_msgs_per_s:,.0f}", sort=x.send_msgs_per_s),
        Cell(f"{x.receive_msgs_per_s:,.0f}", sort=x.receive_msgs_per_s),
        proc,
        Cell(f"{x.send_latency_p95_ms:,.1f}", sort=x.send_latency_p95_ms),
    ]


def against_section(match: reference.ReferenceMatch, compare_href: str) -> Section:
    """The run's figures (and its worst window) above the published rows that match it;
    ``compare_href`` is the comparison page that lists every published configuration."""
    run = match.run
    blocks: list[Block] = [Paragraph(reference.SOURCE)]
    if match.rows or match.worst_window:
        rows: list[list[str | Cell]] = [
            [
                "mqlab (measured period)",
                _figure(run, "send_msgs_per_s"),
                _figure(run, "receive_msgs_per_s"),
                _ms(run.get("processing_us_p95"), unknown.why(run, "processing_us_p95")),
                _ms(run.get("send_call_us_p95"), unknown.why(run, "send_call_us_p95")),
            ]
        ]
        marks: list[str | None] = [None]
        ww = match.worst_window
        if ww:
            rows.append(
                [
                    f"mqlab worst {ww['window_s']:g} s window",
                    "",
                    "",
                    _ms(ww["processing_us_p95"]),
                    _ms(ww["send_call_us_p95"]),
                ]
            )
            marks.append(None)
        for x in match.rows:
            rows.append(published_row(x))
            marks.append("published")
        blocks.append(Table(HEADER, rows, "lrrrr", marks=marks))
    if match.note:
        blocks.append(Paragraph(match.note, note=True))
    if match.other_configs:
        blocks.append(
            Paragraph(
                [
                    "Published configurations for this broker: "
                    + "; ".join(match.other_configs)
                    + " (see ",
                    Link("the comparison page", compare_href),
                    ")",
                ]
            )
        )
    return Section(f"Against {REFERENCE_LABEL}", blocks)
