"""What each fault of a run cost, from the manifest's fault log and the per-second timeline.

A fault lasts from its action (``kill_node``, ``kill_leader``, ``pause_node``,
``crash_all``, ``partition``) to what ends it (``restart_node``, ``resume_node``,
``heal``; a crash of every node ends with the last of its restarts); one that is never
ended lasts to the end of the run. The figures are whole seconds of the ``timeline``
table (one row per wall-clock second), so they are exact to the second:

- ``unavailable_send_s`` / ``unavailable_receive_s``: the seconds from the fault's own
  second on (from the next one when its own second had some, from before the fault),
  one after the other, in which no send was confirmed / nothing was received, up to the
  last second in which the senders tried (confirmed or failed) / anything was received;
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

from mqlab.archive import faultlog as fl
from mqlab.archive.faultlog import netem_label

RECOVERY_FACTOR = 2.0
BASELINE_S = 10
STEADY_S = 3
# a fault on one node, until what ends it on that node
ENDS = {
    fl.KILL_NODE: fl.RESTART_NODE,
    fl.KILL_LEADER: fl.RESTART_NODE,
    fl.PAUSE_NODE: fl.RESUME_NODE,
    fl.POWER_LOSS: fl.RESTART_NODE,
}
LABELS = {
    fl.KILL_NODE: "kill node {node}",
    fl.KILL_LEADER: "kill leader (node {node})",
    fl.PAUSE_NODE: "pause node {node}",
    fl.POWER_LOSS: "power loss on node {node}'s host",
}
# every node at once, until the last of them is restarted
ALL_NODES = {fl.CRASH_ALL: "crash of every node", fl.POWER_LOSS_ALL: "power loss on every host"}
# a partition (its entry, ended by a heal entry of the same kind), by its kind
PARTITION_LABELS = {
    fl.NODE_FROM_BROKERS: "partition: node {node} from brokers",
    fl.LEADER_FROM_BROKERS: "partition: leader (node {node}) from brokers",
    fl.CLIENTS_FROM_LEADER: "partition: clients from leader (node {node})",
    fl.MAJORITY_MINORITY: "partition: node {node} in the minority",
}


def _window(
    out: list[dict[str, Any]], f: dict[str, Any], label: str, end: int | None = None, kind: str = ""
) -> dict[str, Any]:
    w = {"action": f.get("action"), "kind": kind, "node": f.get("node"), "label": label}
    w.update(start_ms=f.get("at_ms"), end_ms=end)
    out.append(w)
    return w


def windows(faults: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each fault of a manifest's fault log with its start and end (None: to the end):
    {action, kind (a partition's kind, else ""), node, label, start_ms, end_ms}. A killed
    node lasts until its restart, a paused node until it resumed, a crash of every node
    until the last restart that followed it, a partition until its heal (the one of that
    kind and node, else the oldest still in place), a netem until its ``netem_end``; a lone
    restart is an instant."""
    out: list[dict[str, Any]] = []
    open_by_node: dict[Any, dict[str, Any]] = {}
    crash: dict[str, Any] | None = None
    down: set[Any] = set()  # nodes of the crash not restarted yet
    cuts: list[dict[str, Any]] = []  # partitions not healed yet
    links: dict[Any, dict[str, Any]] = {}  # netem in place, by node
    for f in sorted(faults, key=lambda f: f.get("at_ms") or 0):
        action, node, at = f.get("action"), f.get("node"), f.get("at_ms")
        if at is None:
            continue

        if action == fl.PARTITION:
            kind = str(f.get("partition") or "")
            label = PARTITION_LABELS.get(kind, "partition: {kind}")
            cuts.append(_window(out, f, label.format(node=node, kind=kind), kind=kind))
        elif action == fl.HEAL:
            kind = str(f.get("partition") or "")
            match = [c for c in cuts if (c["kind"], c["node"]) == (kind, node)] or cuts[:1]
            if match:
                cuts.remove(match[0])
                match[0]["end_ms"] = at
            else:
                _window(out, f, fl.HEAL, at)
        elif action in ENDS:
            open_by_node[node] = _window(out, f, LABELS[str(action)].format(node=node))
            crash = None
        elif action == fl.NETEM:
            links[node] = _window(out, f, netem_label(f))
        elif action == fl.NETEM_END:
            opened = links.pop(node, None)
            if opened is not None:
                opened["end_ms"] = at
        elif action in ALL_NODES:
            crash = _window(out, f, ALL_NODES[str(action)])
            down = set(range(int(f.get("nodes") or 1)))
        elif action in (fl.RESTART_NODE, fl.RESUME_NODE):
            opened = open_by_node.pop(node) if node in open_by_node else None
            if opened is not None:
                opened["end_ms"] = at
            elif crash is not None and node in down:
                crash["end_ms"] = at
                down.discard(node)
            else:
                _window(out, f, f"restart node {node}", at)
    return out


def _second(ms: int) -> int:
    return ms // 1000 * 1000


def _quiet_run(rows: Sequence[dict[str, Any]], start: int, column: str) -> int:
    """Consecutive seconds from ``start`` on whose ``column`` is 0; when the fault's own
    second had some (before the fault struck), from the next second on."""
    own = next((r for r in rows if r["second_ms"] == start), None)
    if own is not None and own[column]:
        start += 1000
    # never past the role's last active second: after the senders stop (or the receivers
    # get nothing more), a quiet second is not an outage
    active = ("confirmed", "failed") if column == "confirmed" else (column,)
    last = max((r["second_ms"] for r in rows if any(r.get(c) for c in active)), default=start)
    n = 0
    for r in rows:
        if r["second_ms"] < start:
            continue
        if r["second_ms"] > last:
            break
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
