"""A run's figures as the report and the site both show them: the formatting of each
figure (unknown as "unknown"), the mqperf row, the clients' shape, the cost line, the
clock section (a :class:`~mqlab.report.model.Section`), the load generator's and the
faults' rows, and what each figure means. Renderers (Markdown, HTML) lay these out."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from mqlab.analysis import faults as fault_figures
from mqlab.analysis.context import clock_problem
from mqlab.report import unknown
from mqlab.report.model import Block, Code, Paragraph, Section, Strong, Table, Text

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


def percent(x: float | None) -> str:
    """A share of the attempts: exact zero as 0 %, tiny shares not rounded away."""
    if x is None:
        return unknown.UNKNOWN
    if x == 0:
        return "0 %"
    return f"{x * 100:.3g} %"


def ms(us: float | int | None) -> str:
    return unknown.UNKNOWN if us is None else f"{us / 1000:,.1f} ms"


def num(x: float | int | None, digits: int = 0) -> str:
    return unknown.show(x, f",.{digits}f")


def secs(ms: int | None, origin: int) -> str:
    return "–" if ms is None else f"{(ms - origin) / 1000:+,.3f} s"


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
        num(run["send_msgs_per_s"]),
        num(run["receive_msgs_per_s"]),
        ms(run["processing_us_p95"]),
        ms(run["send_call_us_p95"]),
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


def schedule_text(scenario: dict[str, Any]) -> str | None:
    workload = scenario.get("workload")
    if not isinstance(workload, dict) or "mode" not in workload:
        return None
    if workload["mode"] == "fixed_rate":
        return f"fixed rate, {workload.get('rate_per_s', 0):g} msgs/s per sender thread"
    return str(workload["mode"]).replace("_", " ")


def usd(x: float | None) -> str:
    return unknown.UNKNOWN if x is None else f"${x:,.4f}" if x < 1 else f"${x:,.2f}"


def context_reasons(run: dict[str, Any]) -> dict[str, str]:
    try:
        raw = json.loads(run.get("context_unknown") or "{}")
    except ValueError:
        return {}
    return {str(k): str(v) for k, v in raw.items()} if isinstance(raw, dict) else {}


def cost_text(run: dict[str, Any]) -> Text | None:
    """The lab's price and the run's cost (the lab's name as code); None for a lab
    without a price."""
    price = run.get("price_per_hour_usd")
    if price is None:
        return None
    why = context_reasons(run)
    hours = run.get("run_hours")
    per_m = run.get("cost_per_million_delivered_usd")
    line = (
        f" ({run.get('lab_kind')}) at ${price:,.2f}/h: cost "
        f"{usd(run.get('cost_usd'))}"
        + (f" over {hours * 60:,.1f} min" if hours is not None else "")
        + f", {usd(per_m)} per million messages delivered"
    )
    if per_m is None and "cost_per_million_delivered_usd" in why:
        line += f" ({why['cost_per_million_delivered_usd']})"
    elif run.get("cost_usd") is None and "cost_usd" in why:
        line += f" ({why['cost_usd']})"
    return ["lab ", Code(str(run.get("lab_name"))), line]


def clocks_section(run: dict[str, Any]) -> Section | None:
    """The clock error bound and each host's offset, for a run on several hosts (or one
    whose bound is unknown or over budget); None for a run on one host."""
    try:
        hosts = json.loads(run.get("clock_hosts") or "{}")
    except ValueError:
        hosts = {}
    bound, budget = run.get("clock_bound_ms"), run.get("clock_budget_ms")
    over = run.get("clock_within_budget") is False
    unmeasured = bound is None and run.get("cluster_target") not in (None, "", "local")
    if len(hosts) < 2 and not over and not unmeasured:
        return None
    blocks: list[Block] = []
    if bound is None:
        why = context_reasons(run).get("clock_bound_ms", "not in the summary")
        blocks.append(
            Paragraph(
                f"Clock error bound: unknown ({why}). End-to-end latencies between hosts "
                "include the difference of their clocks, by an unknown amount."
            )
        )
    else:
        verdict = (
            "" if budget is None else f" ({'over' if over else 'within'} the budget {budget:g} ms)"
        )
        blocks.append(
            Paragraph(
                f"Clock error bound: {bound:g} ms{verdict}. Receivers subtract each sender "
                "host's clock offset (measured NTP-style before the run) from end-to-end "
                "latencies; a corrected latency between two hosts is within this bound of the "
                "truth (the offsets' error bounds plus how far they drifted by the end)."
            )
        )
        if over:
            blocks.append(Paragraph(f"{clock_problem(bound, budget or 0.0)}.", lead="Problem:"))
    if hosts:
        rows = [
            [
                host,
                offset(h.get("offset_ms")),
                offset(h.get("bound_ms"), sign=False),
                "not measured" if h.get("drift_ms") is None else f"{h['drift_ms']:g}",
            ]
            for host, h in sorted(hosts.items())
        ]
        blocks.append(Table(("host", "offset ms", "± ms", "drift ms"), rows, "lrrr"))
        blocks.append(Paragraph("Offset: the host's clock minus the coordinator's."))
    return Section("Clocks", blocks)


def offset(x: float | None, sign: bool = True) -> str:
    return unknown.UNKNOWN if x is None else f"{x:+.3f}" if sign else f"{x:.3f}"


def order_text(run: dict[str, Any]) -> Text | None:
    """The run's order requirement, and why it failed when it broke it; None without
    one."""
    if (run.get("order_requirement") or "any") != "strict":
        return None
    failures = json.loads(run.get("failures") or "[]")
    if failures:
        return [Strong("failed"), f": {'; '.join(failures)}"]
    v = run.get("order_violations")
    seen = "unknown (see Unknown figures)" if v is None else f"{v:,} reordered"
    return f"order requirement: strict, {seen}"


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
            "not recorded" if n["fraction"] is None else percent(n["fraction"]),
        ]
        for n in (section or {}).get("nodes") or []
    ]


LOAD_NOTE = (
    "CPU time (user + system) over each role's measured period; a broker node is its "
    "process group, recorded where mqlab started it on this machine."
)


def seconds(v: int | None) -> str:
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
        seconds(f.get("unavailable_send_s")),
        seconds(f.get("unavailable_receive_s")),
        seconds(f.get("send_p99_recovered_s")),
        seconds(f.get("processing_p99_recovered_s")),
        num(f.get("failed")),
        num(f.get("sent")),
        num(f.get("lost")),
        num(f.get("recovered")),
        num(f.get("duplicated")),
    ]


def longest_gaps(run: dict[str, Any]) -> str:
    return (
        f"Longest stretch without a confirmed send: {seconds(run.get('longest_gap_send_s'))}; "
        f"without a received message: {seconds(run.get('longest_gap_receive_s'))}."
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


def problem_where(problem: dict[str, Any], run_dir: Path) -> str:
    """A ``problems`` row's file (relative to the run) and line, as reports show it."""
    where = str(problem["file"]).removeprefix(str(run_dir.resolve()) + "/")
    return where if problem["line"] is None else f"{where}:{problem['line']}"
