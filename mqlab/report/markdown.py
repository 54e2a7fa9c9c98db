"""``report.md`` and PNG plots for summarized runs, and a sweep report over several.

Every number shown comes from the run's summary tables (``summary/*.parquet``); the
report only formats them. A figure the summary could not compute is null there and
shown as "unknown", with the summary's reason.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from mqlab.analysis import catalog, saturation, tables
from mqlab.analysis import faults as fault_figures
from mqlab.analysis.figures import FIGURES
from mqlab.analysis.tables import CLOCK_PROBLEM, DELIVERY, OUT_OF_RANGE, ROLES, clock_problem
from mqlab.archive.layout import METRICS, read_scenario
from mqlab.errors import ArchiveError
from mqlab.published import base as published
from mqlab.published import sets as published_sets
from mqlab.report import distribution, plots, unknown

LOG = logging.getLogger(__name__)

FORMAT_VERSION = 2
TIMELINE_PNG = plots.TIMELINE_PNG
PERCENTILES_PNG = plots.PERCENTILES_PNG
DISTRIBUTION_TXT = distribution.DISTRIBUTION_TXT
MAX_PROBLEMS_SHOWN = 20
# the mqperf table; "send latency" is the latency of one send() call (a batch)
MQPERF_HEADER = (
    "Threads",
    "Processes",
    "Sender nodes",
    "Receiver nodes",
    "Send msgs/s",
    "Receive msgs/s",
    "Processing latency p95",
    "Send latency p95",
)
METRIC_MEANING = {
    "send_call_us": "one send() call (a batch), from its intended start to its return",
    "send_msg_us": "per message: its send() call's latency; a message never sent counts "
    "from its intended send time to the senders' stop",
    "send_failed_us": "a send() call that raised, from its intended start to the failure",
    "processing_us": "every delivery, from the intended send time to the receipt "
    "(duplicates and redeliveries included)",
    "processing_first_us": "first deliveries only (a receiver node's first copy of a message)",
}
DELIVERY_MEANING = {
    "sent": "handed to send()",
    "confirmed": "send() returned",
    "failed": "send() raised",
    "unsent": "scheduled before the stop, never handed to send() (fixed rate)",
    "received": "every delivery, duplicates and redeliveries included",
    "first_received": "a receiver node's first copy of a message",
    "unique_received": "distinct messages received",
    "lost": "confirmed, never received, and not left in the broker",
    "duplicated": "received minus unique received",
    "reordered": "first deliveries out of place (per receiver thread)",
    "redelivered": "deliveries the broker flagged as redelivered",
    "foreign": "messages without an mqlab header (not counted elsewhere)",
    "recovered": "received though send() raised or never returned (Jepsen's recovered)",
    "unexpected": "received with a seq its sender never handed to send()",
}
TIMELINE_NOTE = (
    "In a closed-loop run the senders send as fast as the broker confirms, so messages "
    "wait in the broker's backlog (bottom panel) and processing latency is mostly that "
    "queueing time, not the broker's delivery time."
)


def _percent(x: float | None) -> str:
    """A share of the attempts: exact zero as 0 %, tiny shares not rounded away."""
    if x is None:
        return unknown.UNKNOWN
    if x == 0:
        return "0 %"
    return f"{x * 100:.3g} %"


def _ms(us: float | int | None) -> str:
    return unknown.UNKNOWN if us is None else f"{us / 1000:,.1f} ms"


def _num(x: float | int | None, digits: int = 0) -> str:
    return unknown.show(x, f",.{digits}f")


def _secs(ms: int | None, origin: int) -> str:
    return "–" if ms is None else f"{(ms - origin) / 1000:+,.3f} s"


def _table(header: Sequence[str], rows: Sequence[Sequence[str]], align: str = "") -> list[str]:
    """A markdown table; ``align`` gives one character per column: l or r (default l)."""
    marks = ["---:" if a == "r" else "---" for a in align.ljust(len(header), "l")]
    out = ["| " + " | ".join(header) + " |", "| " + " | ".join(marks) + " |"]
    out += ["| " + " | ".join(r) + " |" for r in rows]
    return out


def threads_label(run: dict[str, Any]) -> str:
    """Threads per worker process (senders/receivers when they differ)."""
    st, rt = run["sender_threads"], run["receiver_threads"]
    return str(st) if st == rt else f"{st}/{rt}"


def processes_of(run: dict[str, Any], role: str) -> int:
    """Worker processes per ``role`` node of a ``runs`` row; a row summarized before they
    were counted is of a run with one per node (null there)."""
    v = run.get(f"{role}_processes")
    return 1 if v is None else int(v)


def processes_label(run: dict[str, Any]) -> str:
    """Worker processes per client node (senders/receivers when they differ)."""
    sp, rp = processes_of(run, "sender"), processes_of(run, "receiver")
    return str(sp) if sp == rp else f"{sp}/{rp}"


def mqperf_row(run: dict[str, Any]) -> list[str]:
    return [
        threads_label(run),
        processes_label(run),
        str(run["sender_nodes"]),
        str(run["receiver_nodes"]),
        _num(run["send_msgs_per_s"]),
        _num(run["receive_msgs_per_s"]),
        _ms(run["processing_us_p95"]),
        _ms(run["send_call_us_p95"]),
    ]


def clients_shape(run: dict[str, Any]) -> str:
    """``2 sender node(s) × 2 process(es) × 4 threads, 1 receiver node(s) × ...``"""
    return ", ".join(
        f"{run[f'{role}_nodes']} {role} node(s) × {processes_of(run, role)} process(es) × "
        f"{run[f'{role}_threads']} threads"
        for role in ("sender", "receiver")
    )


def queues_note(run: dict[str, Any]) -> str | None:
    """With several queues (``workload.queues``): how the threads were spread over them;
    None for one queue (and for rows summarized before queues existed, null there)."""
    n = int(run.get("queues") or 1)
    if n == 1:
        return None
    return (
        f"{n} queues: sender thread s sends to queue s mod {n}, receiver thread r "
        f"receives from queue r mod {n}"
    )


def _schedule(scenario: dict[str, Any]) -> str | None:
    workload = scenario.get("workload")
    if not isinstance(workload, dict) or "mode" not in workload:
        return None
    if workload["mode"] == "fixed_rate":
        return f"fixed rate, {workload.get('rate_per_s', 0):g} msgs/s per sender thread"
    return str(workload["mode"]).replace("_", " ")


def _usd(x: float | None) -> str:
    return unknown.UNKNOWN if x is None else f"${x:,.4f}" if x < 1 else f"${x:,.2f}"


def _context_reasons(run: dict[str, Any]) -> dict[str, str]:
    try:
        raw = json.loads(run.get("context_unknown") or "{}")
    except ValueError:
        return {}
    return {str(k): str(v) for k, v in raw.items()} if isinstance(raw, dict) else {}


def _cost(run: dict[str, Any]) -> list[str]:
    """The lab's price and the run's cost; nothing for a lab without a price."""
    price = run.get("price_per_hour_usd")
    if price is None:
        return []
    why = _context_reasons(run)
    hours = run.get("run_hours")
    per_m = run.get("cost_per_million_delivered_usd")
    line = (
        f"- lab `{run.get('lab_name')}` ({run.get('lab_kind')}) at ${price:,.2f}/h: cost "
        f"{_usd(run.get('cost_usd'))}"
        + (f" over {hours * 60:,.1f} min" if hours is not None else "")
        + f", {_usd(per_m)} per million messages delivered"
    )
    if per_m is None and "cost_per_million_delivered_usd" in why:
        line += f" ({why['cost_per_million_delivered_usd']})"
    elif run.get("cost_usd") is None and "cost_usd" in why:
        line += f" ({why['cost_usd']})"
    return [line]


def _clocks(run: dict[str, Any]) -> list[str]:
    """The clock error bound and each host's offset, for a run on several hosts (or one
    whose bound is unknown or over budget); nothing for a run on one host."""
    try:
        hosts = json.loads(run.get("clock_hosts") or "{}")
    except ValueError:
        hosts = {}
    bound, budget = run.get("clock_bound_ms"), run.get("clock_budget_ms")
    over = run.get("clock_within_budget") is False
    unmeasured = bound is None and run.get("cluster_target") not in (None, "", "local")
    if len(hosts) < 2 and not over and not unmeasured:
        return []
    lines = ["## Clocks", ""]
    if bound is None:
        why = _context_reasons(run).get("clock_bound_ms", "not in the summary")
        lines.append(
            f"Clock error bound: unknown ({why}). End-to-end latencies between hosts "
            "include the difference of their clocks, by an unknown amount."
        )
    else:
        verdict = (
            "" if budget is None else f" ({'over' if over else 'within'} the budget {budget:g} ms)"
        )
        lines.append(
            f"Clock error bound: {bound:g} ms{verdict}. Receivers subtract each sender "
            "host's clock offset (measured NTP-style before the run) from end-to-end "
            "latencies; a corrected latency between two hosts is within this bound of the "
            "truth (the offsets' error bounds plus how far they drifted by the end)."
        )
        if over:
            lines += ["", f"**Problem:** {clock_problem(bound, budget or 0.0)}."]
    if hosts:
        rows = [
            [
                host,
                _offset(h.get("offset_ms")),
                _offset(h.get("bound_ms"), sign=False),
                "not measured" if h.get("drift_ms") is None else f"{h['drift_ms']:g}",
            ]
            for host, h in sorted(hosts.items())
        ]
        lines += ["", *_table(("host", "offset ms", "± ms", "drift ms"), rows, "lrrr")]
        lines += ["", "Offset: the host's clock minus the coordinator's."]
    return lines


def _offset(x: float | None, sign: bool = True) -> str:
    return unknown.UNKNOWN if x is None else f"{x:+.3f}" if sign else f"{x:.3f}"


def order_lines(run: dict[str, Any]) -> list[str]:
    """The run's order requirement, and why it failed when it broke it (one line)."""
    if (run.get("order_requirement") or "any") != "strict":
        return []
    failures = json.loads(run.get("failures") or "[]")
    if failures:
        return [f"- **failed**: {'; '.join(failures)}"]
    v = run.get("order_violations")
    seen = "unknown (see Unknown figures)" if v is None else f"{v:,} reordered"
    return [f"- order requirement: strict, {seen}"]


def _header(run: dict[str, Any], scenario: dict[str, Any]) -> list[str]:
    schedule = _schedule(scenario)
    return [
        f"# {run['run_id']}",
        "",
        f"<!-- mqlab report, format_version {FORMAT_VERSION} -->",
        "",
        f"- scenario `{run['scenario']}`, broker `{run['broker']}`, profile "
        f"`{run['profile']}`, status `{run['status']}` ({run['end_reason']})",
        f"- started {run['started_at']}, ended {run['ended_at']}",
        f"- message size {run['message_bytes']} bytes, batch {run['batch']}"
        + (f", {schedule}" if schedule else ""),
        f"- {clients_shape(run)}",
        *([f"- {q}"] if (q := queues_note(run)) else []),
        *order_lines(run),
        *_cost(run),
        "",
    ]


def _periods(run: dict[str, Any], window_p95: list[int]) -> list[str]:
    origin = run["measure_start_ms"]
    warm = (run["warmup_end_ms"] - origin) / 1000
    lines = [
        "## Measured periods",
        "",
        f"Times are seconds since the senders started ({origin} ms since the epoch). The "
        f"first {warm:g} s are warm-up and not counted. A role's period runs from its first "
        "counted interval to its last counted event (confirmed send, receive); throughput "
        "is the messages counted over that period.",
        "",
    ]
    rows = []
    for _, name in ROLES:
        seconds = run[f"{name}_period_s"]
        rows.append(
            [
                name,
                _secs(run[f"{name}_start_ms"], origin),
                _secs(run[f"{name}_end_ms"], origin),
                "nothing counted" if seconds is None else f"{seconds:,.3f}",
                _num(run[f"{name}_msgs_per_s"]),
                _num(run[f"{name}_mb_per_s"], 3),
            ]
        )
    lines += _table(("role", "from", "to", "seconds", "msgs/s", "MB/s"), rows, "lrrrrr")
    lines += [
        "",
        f"Max sender lag: {_num(run['sender_lag_ms_max'])} ms (how far the slowest sender "
        "thread fell behind its fixed-rate schedule; 0 in closed loop).",
    ]
    if window_p95:
        lines += [
            "",
            f"Processing latency p95 per {run['window_s']:g} s window: worst "
            f"{_ms(max(window_p95))}, best {_ms(min(window_p95))} over {len(window_p95)} "
            "windows.",
        ]
    return lines


def _reasons(reasons: dict[str, str], figures: Sequence[str]) -> list[str]:
    """One line per reason, naming every figure it makes unknown."""
    by_reason: dict[str, list[str]] = {}
    for f in figures:
        if f in reasons:
            by_reason.setdefault(reasons[f], []).append(f)
    return [f"- {', '.join(fs)}: {why}" for why, fs in by_reason.items()]


def _delivery(run: dict[str, Any], reasons: dict[str, str]) -> list[str]:
    lines = ["## Delivery", ""]
    lines += _table(
        ("figure", "messages", "meaning"),
        [
            [d.replace("_", " "), _num(run[f"delivery_{d}"]), DELIVERY_MEANING[d]]
            for d in DELIVERY
            if d != "undrained"
        ],
        "lrl",
    )
    share = tables.fractions(run)
    lines += [
        "",
        f"**Of the {_num(run['delivery_sent'])} messages sent** (Jepsen's total-queue figures): "
        + ", ".join(f"{k} {_percent(share[k])}" for k in tables.CHECKER)
        + ".",
    ]
    undrained = run["delivery_undrained"]
    lines.append("")
    if undrained is None:
        lines.append("**Undrained:** unknown (the reason is below); it is never counted as lost.")
    else:
        lines.append(
            f"**Undrained:** {undrained:,} message(s) were still in the broker when the "
            "receivers stopped; they are not counted as lost."
        )
    unknown_lines = _reasons(reasons, DELIVERY)
    if unknown_lines:
        lines += [
            "",
            "**Unknown figures** (the summary could not compute them):",
            "",
            *unknown_lines,
        ]
    return lines


def _out_of_range(run: dict[str, Any], reasons: dict[str, str]) -> list[str]:
    shown = []
    for m in METRICS:
        below, above = (run[f"{m}_{o}"] for o in OUT_OF_RANGE)
        if below or above:
            shown.append(f"- {m}: {below or 0:,} below zero, {above or 0:,} above 1 h")
    keys = [f"{m}_{o}" for m in METRICS for o in OUT_OF_RANGE]
    unknown_lines = _reasons(reasons, keys)
    lines = []
    if shown:
        lines += [
            "",
            "**Latency values out of range**, recorded clamped at 0 or at the histogram's 1 h "
            "maximum (below zero: clock steps or skew between hosts), so percentiles near "
            "them are bounds:",
            "",
            *shown,
        ]
    if unknown_lines:
        lines += ["", "**Out-of-range counts unknown:**", "", *unknown_lines]
    return lines


def _latency(run: dict[str, Any], reasons: dict[str, str]) -> list[str]:
    lines = ["## Latency (measured period, µs)", ""]
    lines += _table(
        ("metric", *(f.replace("_", ".") for f in FIGURES)),
        [[m, *(_num(run[f"{m}_{f}"], 1 if f == "mean" else 0) for f in FIGURES)] for m in METRICS],
        "l" + "r" * len(FIGURES),
    )
    lines += ["", *(f"- `{m}`: {METRIC_MEANING[m]}" for m in METRICS)]
    return lines + _out_of_range(run, reasons)


def _problems(run: dict[str, Any], problems: list[dict[str, Any]], run_dir: Path) -> list[str]:
    # the clock's problem line is shown with the clocks
    problems = [p for p in problems if not str(p["problem"]).startswith(CLOCK_PROBLEM)]
    if not (run["bad_lines"] or run["missing_files"] or problems):
        return []
    lines = [
        "## Input problems",
        "",
        f"{run['bad_lines']} bad line(s) and {run['missing_files']} missing or unreadable "
        "file(s) were skipped and counted (all of them in `summary/problems.parquet`):",
        "",
    ]
    for p in problems[:MAX_PROBLEMS_SHOWN]:
        lines.append(f"- `{problem_where(p, run_dir)}`: {p['problem']}")
    if len(problems) > MAX_PROBLEMS_SHOWN:
        lines.append(f"- … and {len(problems) - MAX_PROBLEMS_SHOWN} more")
    return lines


def run_markdown(
    run: dict[str, Any],
    windows: list[dict[str, Any]],
    images: Sequence[str],
    problems: list[dict[str, Any]] | None = None,
    scenario: dict[str, Any] | None = None,
    run_dir: Path | None = None,
    faults: Sequence[dict[str, Any]] | None = (),
) -> str:
    """The report of one ``runs`` row (with its windows, problems, faults and written
    images)."""
    reasons = unknown.reasons(run)
    worst = [w["processing_us_p95"] for w in windows if w["processing_us_count"]]
    lines = _header(run, scenario or {})
    lines += ["## mqperf table", "", *_table(MQPERF_HEADER, [mqperf_row(run)], "llllrrrr"), ""]
    marked = saturation.marks(run, run.get("stand_in"))
    if marked:
        where = [] if marked == ["stand-in"] else ["see the load generator section"]
        if run.get("stand_in"):
            b = run["broker"]
            served = f"{run['stand_in']} served, not {b} itself"
            where.insert(0, f"{served}: never quote these figures as {b}'s")
        lines += [f"Marked **{', '.join(marked)}**: {'; '.join(where)}.", ""]
    lines += _periods(run, worst)
    lines += ["", *_load_generator(run)]
    clocks = _clocks(run)
    if clocks:
        lines += ["", *clocks]
    lines += ["", *_delivery(run, reasons), ""]
    lines += [*_faults(run, faults), ""]
    lines += _latency(run, reasons)
    lines += _published(run, run_dir)
    if TIMELINE_PNG in images:
        lines += ["", "## Timeline", "", TIMELINE_NOTE, "", f"![timeline]({TIMELINE_PNG})"]
    else:
        lines += ["", "## Timeline", "", "No per-second figures (the timeline table is empty)."]
    if PERCENTILES_PNG in images:
        lines += ["", "## Latency by percentile", "", f"![percentiles]({PERCENTILES_PNG})"]
    if DISTRIBUTION_TXT in images:
        lines += [
            "",
            "Each latency's whole distribution as text, listed as HdrHistogram lists one "
            "(value at each percentile step, with the count up to it): "
            f"[{DISTRIBUTION_TXT}]({DISTRIBUTION_TXT}).",
        ]
    extra = _problems(run, problems or [], run_dir or Path(run["run_dir"]))
    if extra:
        lines += ["", *extra]
    return "\n".join(lines) + "\n"


def published_cell(x: Any) -> str:
    """A cell of a published-reference block: a figure (1 decimal under 1,000), a word,
    or "unknown" (not published, or not measured)."""
    if x is None:
        return "unknown"
    if isinstance(x, float):
        return f"{x:,.1f}" if abs(x) < 1000 else f"{x:,.0f}"
    if isinstance(x, int):
        return f"{x:,}"
    return str(x)


def published_block(block: published.Block) -> list[str]:
    """One reference block as markdown: its title, table and notes."""
    lines = [f"**{block.title}**", ""]
    lines += _table(block.headers, [[published_cell(c) for c in r] for r in block.rows])
    lines += [""] + [f"- {n}" for n in block.notes] + ([""] if block.notes else [])
    return lines


def _published(run: dict[str, Any], run_dir: Path | None) -> list[str]:
    """The published experiment the run's scenario reproduces, next to the run."""
    ref = published.of_run(run_dir or Path(run["run_dir"]))
    if ref is None:
        return []
    name, experiment = ref
    try:
        dataset = published_sets.get(name)
    except published.ReferenceError as err:
        return ["", "## Published reference", "", f"Unknown: {err}."]
    lines = ["", "## Published reference", "", f"{name}, {experiment}: {dataset.source}.", ""]
    for block in dataset.blocks([run], experiment):
        lines += published_block(block)
    return lines


LOAD_HEADER = ["Node", "Host", "Processes", "Cores", "CPU s", "Of its cores"]


def load_generator_rows(section: dict[str, Any] | None) -> list[list[str]]:
    """The CPU of each node of a run's saturation section, as the report shows it."""
    return [
        [
            n["node"],
            n["host"] or "?",
            "" if n["processes"] is None else str(n["processes"]),
            str(n["cores"] or "?"),
            "not recorded" if n["cpu_s"] is None else f"{n['cpu_s']:,.1f}",
            "not recorded" if n["fraction"] is None else _percent(n["fraction"]),
        ]
        for n in (section or {}).get("nodes") or []
    ]


LOAD_NOTE = (
    "CPU time (user + system) over each role's measured period; a broker node is its "
    "process group, recorded where mqlab started it on this machine."
)


def _load_generator(run: dict[str, Any]) -> list[str]:
    """Was the load generator the bottleneck: CPU per node, the marks and why."""
    section = json.loads(run["saturation"]) if run.get("saturation") else None
    lines = ["## Load generator", ""]
    for sentence in saturation.explain(section):
        lines += [sentence, ""]
    rows = load_generator_rows(section)
    if rows:
        lines += [*_table(LOAD_HEADER, rows, "llrrrr"), "", LOAD_NOTE, ""]
    return lines[:-1]


def _seconds(v: int | None) -> str:
    return unknown.UNKNOWN if v is None else f"{v:,} s"


# the report's faults table: a row per fault (a ``faults`` row), these columns
FAULT_HEADER = (
    "fault",
    "from",
    "to",
    "no sends confirmed",
    "nothing received",
    "send p99 back",
    "processing p99 back",
    "failed sends",
    "sent in it",
    "of them lost",
    "recovered",
    "duplicated",
)


def fault_row(f: dict[str, Any], origin: int) -> list[str]:
    """A fault's cells of the faults table (a ``faults`` row, or a fault window of
    :func:`mqlab.analysis.faults.windows` without figures: "unknown"); times are
    seconds since ``origin`` (the run's ``measure_start_ms``)."""

    def at(ms: int | None) -> str:
        return "end of run" if ms is None else f"{(ms - origin) / 1000:,.1f} s"

    return [
        f["label"],
        at(f["start_ms"]),
        at(f["end_ms"]),
        _seconds(f.get("unavailable_send_s")),
        _seconds(f.get("unavailable_receive_s")),
        _seconds(f.get("send_p99_recovered_s")),
        _seconds(f.get("processing_p99_recovered_s")),
        _num(f.get("failed")),
        _num(f.get("sent")),
        _num(f.get("lost")),
        _num(f.get("recovered")),
        _num(f.get("duplicated")),
    ]


def longest_gaps(run: dict[str, Any]) -> str:
    return (
        f"Longest stretch without a confirmed send: {_seconds(run.get('longest_gap_send_s'))}; "
        f"without a received message: {_seconds(run.get('longest_gap_receive_s'))}."
    )


def fault_note(run: dict[str, Any]) -> str:
    """What the faults table's figures mean, and the run's longest gaps."""
    return (
        f"Times are since the senders started; figures are whole seconds of the timeline "
        f'from the fault\'s own second. "p99 back": until the per-second p99 is within '
        f"{fault_figures.RECOVERY_FACTOR:g}x its median over the {fault_figures.BASELINE_S} "
        f"s before the fault for {fault_figures.STEADY_S} s (unknown: no level before, or "
        f'never back). "Sent in it": messages handed to send() in the fault\'s seconds '
        "(from each sender's per-second seq marks); of them lost: confirmed, never "
        "received, not left in the broker; recovered: received though their send failed; "
        "duplicated: received more than once (again by one receiver node, or by two). "
        f"{longest_gaps(run)}"
    )


def _faults(run: dict[str, Any], faults: Sequence[dict[str, Any]] | None) -> list[str]:
    """What each fault cost (the ``faults`` table; None: the summary has none), and the
    run's longest gaps."""
    if faults is None:
        return [
            "## Faults",
            "",
            f"{unknown.UNKNOWN}: the summary predates fault figures "
            "(run `mqlab summarize` on this run).",
        ]
    if not faults:
        return ["## Faults", "", "None injected. " + longest_gaps(run)]
    rows = [fault_row(f, run["measure_start_ms"]) for f in faults]
    return [
        "## Faults",
        "",
        *_table(FAULT_HEADER, rows, "lrrrrrrrrrrr"),
        "",
        fault_note(run),
    ]


def problem_where(problem: dict[str, Any], run_dir: Path) -> str:
    """A ``problems`` row's file (relative to the run) and line, as reports show it."""
    where = str(problem["file"]).removeprefix(str(run_dir.resolve()) + "/")
    return where if problem["line"] is None else f"{where}:{problem['line']}"


def _manifest_faults(run_dir: Path) -> list[dict[str, Any]]:
    try:
        faults = json.loads((run_dir / "manifest.json").read_text()).get("faults") or []
    except (OSError, ValueError) as err:
        LOG.warning("%s: no faults drawn (%s)", run_dir / "manifest.json", err)
        return []
    return list(faults)


def report_run(run_dir: Path | str) -> Path:
    """Write ``report.md``, ``timeline.png``, ``latency_percentiles.png`` and
    ``latency_distribution.txt`` into the run."""
    run_dir = Path(run_dir)
    run = catalog.read_run_table(run_dir, "runs").to_pylist()[0]
    windows = catalog.read_run_table(run_dir, "windows").to_pylist()
    latency = catalog.read_run_table(run_dir, "latency").to_pylist()
    timeline = catalog.read_run_table(run_dir, "timeline").to_pylist()
    problems = catalog.read_run_table(run_dir, "problems").to_pylist()
    try:
        scenario = read_scenario(run_dir)
    except ArchiveError as err:
        LOG.warning("%s", err)
        scenario = {}
    faults = _manifest_faults(run_dir)
    images = plots.plot_run(run, latency, timeline, run_dir, faults)  # the site draws the same
    if distribution.write_distribution(run, latency, run_dir) is not None:
        images = [*images, DISTRIBUTION_TXT]
    out = run_dir / "report.md"
    try:
        fault_rows = catalog.read_run_table(run_dir, "faults").to_pylist()
    except ArchiveError as err:
        LOG.warning("%s", err)
        fault_rows = None
    out.write_text(run_markdown(run, windows, images, problems, scenario, run_dir, fault_rows))
    return out


def _fault_column(f: dict[str, Any]) -> str:
    """A matrix column: the fault's action; a partition with its kind."""
    if f["action"] == "partition":
        return f"partition: {f.get('kind') or '?'}"
    return str(f["action"])


def matrix_columns(entries: Sequence[tuple[Any, Sequence[dict[str, Any]] | None]]) -> list[str]:
    """The durability matrix's columns: each kind of fault of the entries' runs (their
    ``faults`` rows), in the order first met."""
    columns: list[str] = []
    for _run, faults in entries:
        for f in faults or []:
            if _fault_column(f) not in columns:
                columns.append(_fault_column(f))
    return columns


def matrix_cells(faults: Sequence[dict[str, Any]] | None, columns: Sequence[str]) -> list[str]:
    """A run's cells of the durability matrix, one per column: what its faults of that
    kind cost ("–": none of that kind; "unknown" in each when ``faults`` is None)."""
    if faults is None:
        return [unknown.UNKNOWN] * len(columns)

    def cell(fs: list[dict[str, Any]]) -> str:
        return " / ".join(
            f"lost {_num(f.get('lost'))} · duplicated {_num(f.get('duplicated'))} · "
            f"{_seconds(f.get('unavailable_send_s'))}"
            for f in fs
        )

    return [cell([f for f in faults if _fault_column(f) == c]) or "–" for c in columns]


MATRIX_NOTE = (
    "Each cell: of the messages sent while the fault lasted, how many were lost and how "
    "many were delivered more than once; the seconds without a confirmed send"
)


def fault_matrix(
    entries: Sequence[tuple[dict[str, Any], Sequence[dict[str, Any]] | None]],
) -> list[str]:
    """The durability matrix of several runs: a row per run (broker and profile), a column
    per kind of fault, in each cell what that fault cost: the messages sent while it
    lasted that were lost and that were delivered more than once, and the seconds without
    a confirmed send. Empty when no run had a fault."""
    columns = matrix_columns(entries)
    if not columns:
        return []
    rows = [
        [run["broker"], run["profile"], *matrix_cells(faults, columns)] for run, faults in entries
    ]
    return [
        "## Durability matrix",
        "",
        f"{MATRIX_NOTE} (each run's report.md has every figure of every fault).",
        "",
        *_table(("broker", "profile", *columns), rows, "ll" + "l" * len(columns)),
        "",
    ]


def report_sweep(run_dirs: Sequence[Path | str], out_dir: Path | str) -> Path:
    """Throughput and p95 against client threads and nodes over several runs."""
    runs_in_order = [catalog.read_run_table(d, "runs").to_pylist()[0] for d in run_dirs]
    runs = list(runs_in_order)
    if len(runs) < 2:
        raise ArchiveError("a sweep report needs at least two runs")
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    runs.sort(
        key=lambda r: (r["broker"], r["sender_nodes"], r["receiver_nodes"], r["sender_threads"])
    )
    plots.plot_sweep(
        runs,
        out_dir / "sweep_throughput.png",
        "send_msgs_per_s",
        "send msgs/s",
        "Throughput against threads and nodes",
    )
    plots.plot_sweep(
        runs,
        out_dir / "sweep_p95.png",
        "processing_us_p95",
        "processing latency p95 (ms)",
        "p95 against threads and nodes",
        scale=1 / 1000,
    )
    lines = ["# Sweep", "", f"<!-- mqlab sweep report, format_version {FORMAT_VERSION} -->", ""]
    lines += _table(
        ("run", "broker", *MQPERF_HEADER, "Lost", "Undrained"),
        [
            [
                r["run_id"],
                r["broker"],
                *mqperf_row(r),
                _num(r["delivery_lost"]),
                _num(r["delivery_undrained"]),
            ]
            for r in runs
        ],
        "llllllrrrrrr",
    )
    if any(r["delivery_lost"] is None or r["delivery_undrained"] is None for r in runs):
        lines += ["", "Unknown figures: see each run's report.md for why."]
    lines += ["", "![throughput](sweep_throughput.png)", "", "![p95](sweep_p95.png)", ""]
    entries = []
    for d, r in zip(run_dirs, runs_in_order, strict=True):
        try:
            entries.append((r, catalog.read_run_table(d, "faults").to_pylist()))
        except ArchiveError as err:
            LOG.warning("%s", err)
            entries.append((r, None))
    lines += fault_matrix(entries)
    out = out_dir / "sweep-report.md"
    out.write_text("\n".join(lines))
    return out
