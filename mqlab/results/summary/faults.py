"""What each fault of a run cost, from the manifest's fault log and the per-second timeline.

A fault lasts from its action (``kill_node``, ``kill_leader``, ``pause_node``,
``crash_all``, ``partition``) to what ends it (``restart_node``, ``resume_node``,
``heal``; a crash of every node ends with the last of its restarts); one that is never
ended lasts to the end of the run. The figures are whole seconds of the ``timeline``
table (one row per wall-clock second), so they are exact to the second:

- ``unavailable_send_s`` / ``unavailable_receive_s``: the seconds from the fault's own
  second on (from the next one when its own second had some, from before the fault),
  one after the other, in which no send was confirmed / nothing was received;
- ``send_p99_recovered_s`` / ``processing_p99_recovered_s``: seconds from the fault's
  second until the per-second p99 is back within ``RECOVERY_FACTOR`` times its level
  before the fault (the median p99 of up to ``BASELINE_S`` seconds before the fault's
  second) and stays there for ``STEADY_S`` seconds with values; None when there was no
  level before the fault or it never came back;
- ``failed``: sends that raised in the fault's seconds (its first to its last);
- ``repeats``: deliveries in the fault's seconds of a message the receiver node had had
  before (redeliveries and duplicates as one receiver node sees them).

And for the whole run: the longest stretch of seconds without a confirmed send and
without a received message, between the first and the last second that had any.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Any

RECOVERY_FACTOR = 2.0
BASELINE_S = 10
STEADY_S = 3
ENDS = {
    "kill_node": "restart_node",
    "kill_leader": "restart_node",
    "pause_node": "resume_node",
    "partition": "heal",
}
LABELS = {
    "kill_node": "kill node {node}",
    "kill_leader": "kill leader (node {node})",
    "pause_node": "pause node {node}",
}


def _label(f: dict[str, Any]) -> str:
    action = str(f.get("action"))
    if action == "partition":
        return f"partition {f.get('partition') or ''} (node {f.get('node')})".replace("  ", " ")
    return LABELS.get(action, action + " node {node}").format(node=f.get("node"))


def windows(faults: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each fault of a manifest's fault log with its start and end (None: to the end):
    {action, node, label, start_ms, end_ms}. A lone restart is an instant."""
    out: list[dict[str, Any]] = []
    open_by_node: dict[Any, dict[str, Any]] = {}
    open_partition: dict[str, Any] | None = None
    crash: dict[str, Any] | None = None
    down: set[Any] = set()  # nodes of the crash not restarted yet
    for f in sorted(faults, key=lambda f: f.get("at_ms") or 0):
        action, node, at = f.get("action"), f.get("node"), f.get("at_ms")
        if at is None:
            continue
        window = {"action": action, "node": node, "label": "", "start_ms": at, "end_ms": None}
        if action in ENDS:
            window["label"] = _label(f)
            out.append(window)
            if action == "partition":
                open_partition = window
            else:
                open_by_node[node] = window
            crash = None
        elif action == "crash_all":
            window["label"] = "crash of every node"
            out.append(window)
            crash = window
            down = set(range(int(f.get("nodes") or 1)))
        elif action == "heal":
            if open_partition is not None:
                open_partition["end_ms"] = at
                open_partition = None
        elif action in ("restart_node", "resume_node"):
            opened = open_by_node.pop(node) if node in open_by_node else None
            if opened is not None:
                opened["end_ms"] = at
            elif crash is not None and node in down:
                crash["end_ms"] = at
                down.discard(node)
            else:
                window.update(label=f"restart node {node}", end_ms=at)
                out.append(window)
    return out


def _second(ms: int) -> int:
    return ms // 1000 * 1000


def _quiet_run(rows: Sequence[dict[str, Any]], start: int, column: str) -> int:
    """Consecutive seconds from ``start`` on whose ``column`` is 0; when the fault's own
    second had some (before the fault struck), from the next second on."""
    own = next((r for r in rows if r["second_ms"] == start), None)
    if own is not None and own[column]:
        start += 1000
    n = 0
    for r in rows:
        if r["second_ms"] < start:
            continue
        if r["second_ms"] != start + n * 1000 or r[column]:
            break
        n += 1
    return n


def _recovered_s(rows: Sequence[dict[str, Any]], start: int, metric: str) -> int | None:
    count, p99 = f"{metric}_count", f"{metric}_p99"
    before = [
        r[p99] for r in rows if start - BASELINE_S * 1000 <= r["second_ms"] < start and r[count]
    ]
    if not before:
        return None
    limit = RECOVERY_FACTOR * statistics.median(before)
    after = [r for r in rows if r["second_ms"] >= start and r[count]]
    for i, r in enumerate(after):
        if all(x[p99] <= limit for x in after[i : i + STEADY_S]):
            return int((r["second_ms"] - start) // 1000)
    return None


def figures(
    fault_log: Sequence[dict[str, Any]], timeline: Sequence[dict[str, Any]]
) -> list[dict[str, Any]]:
    """One row per fault window: its times and what it cost (see the module's text)."""
    rows = sorted(timeline, key=lambda r: r["second_ms"])
    last = rows[-1]["second_ms"] if rows else 0
    out = []
    for i, w in enumerate(windows(fault_log)):
        start = _second(w["start_ms"])
        end = _second(w["end_ms"]) if w["end_ms"] is not None else last
        out.append(
            {
                "fault_index": i,
                **w,
                "unavailable_send_s": _quiet_run(rows, start, "confirmed"),
                "unavailable_receive_s": _quiet_run(rows, start, "received"),
                "send_p99_recovered_s": _recovered_s(rows, start, "send_msg_us"),
                "processing_p99_recovered_s": _recovered_s(rows, start, "processing_us"),
                "failed": sum(r["failed"] for r in rows if start <= r["second_ms"] <= end),
                "repeats": sum(r.get("repeats", 0) for r in rows if start <= r["second_ms"] <= end),
            }
        )
    return out


def longest_gap_s(timeline: Sequence[dict[str, Any]], column: str) -> int:
    """The longest run of seconds with ``column`` 0 between the first and the last second
    with any (missing seconds count as 0)."""
    busy = sorted(r["second_ms"] for r in timeline if r[column])
    return max((int((b - a) // 1000) - 1 for a, b in zip(busy, busy[1:], strict=False)), default=0)
