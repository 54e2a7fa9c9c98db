"""Was the load generator the bottleneck? Each node's CPU over the measured period, and
the run's two marks.

- A node's **CPU fraction** = the CPU time its processes used in the intervals of its
  cpu.csv files that start in its role's measured period (from the warm-up end to the
  period's end; brokers: from the earlier start to the later end of the two roles),
  over the seconds those intervals cover (its longest-covering process's) times its
  cores. Client nodes are ``sender-NN`` / ``receiver-NN`` (all their processes),
  broker nodes ``broker-NN`` (their process group; recorded on this machine only).
- A host's figures add up the nodes on it: its clients' fraction and, where the
  brokers ran on it too, everything's.
- **client_bound**: a client node used more than ``CPU_LIMIT`` of its cores; or the
  client nodes sharing a host used, together, more than ``CPU_LIMIT`` of its cores (said
  when none of them is over on its own); or
  fixed-rate senders fell more than ``LAG_LIMIT_MS`` behind their schedule in a second
  of the sender's measured period outside the faults (a fault's seconds and
  ``FAULT_GRACE_MS`` after its end); or closed-loop senders kept fewer than
  ``CONCURRENCY_LIMIT`` of their batches in flight (below). None when no reason holds
  but a client node's CPU is unknown.
- **effective_concurrency** (closed loop only): by Little's law, the batches the
  senders had in flight on average = the sum of the send latencies of the batches
  confirmed (``send_call_us``: one value per confirmed batch; count x mean of each
  interval) over the seconds they cover: the senders' measured intervals of the
  sender's measured period outside the faults (as the lag check), each clipped to the
  period. It equals ``senders`` (every sender thread of the run) when no sender waits on
  anything but its own batch; the client's own time between batches lowers it. None in
  fixed-rate runs (a sender idles between batches by design), with no batch confirmed
  in those seconds, or when a sender's send latency log is missing.
- **receivers_behind**: the backlog (messages confirmed and not yet received, the
  timeline's ``backlog``) grew through the sender's measured period: its least-squares
  trend over the period's seconds exceeds ``BACKLOG_LIMIT`` of the messages confirmed a
  second, and adds up to more than ``BACKLOG_MIN`` messages. None without receivers or
  with fewer than two seconds measured.
- **shared_cores**: brokers and clients ran on the cores of one machine (``local``, or a
  ``netns`` lab: every namespace is this machine).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from mqlab.archive import layout

CPU_LIMIT = 0.9
LAG_LIMIT_MS = 1000
FAULT_GRACE_MS = 10_000
BACKLOG_LIMIT = 0.05
BACKLOG_MIN = 10
# closed loop: effective concurrency below this share of the senders marks the run
# client-bound (see docs/archive-format.md for the runs this was set against)
CONCURRENCY_LIMIT = 0.85


def _node_key(wid: str, role: str, node: Any) -> str:
    if isinstance(node, int):
        return f"{role}-{node:02d}"
    parsed = layout.parse_worker_id(wid)[1]
    return f"{role}-{parsed:02d}" if parsed is not None else wid


def _percent(x: float) -> str:
    return f"{x * 100:.0f} %"


def _cpu_of(
    rows: Sequence[Sequence[int]], start: int | None, end: int | None
) -> tuple[int, int] | None:
    """(cpu µs, covered ms) of the rows that start in [start, end)."""
    if start is None or end is None:
        return None
    cpu_us = covered = 0
    for s, length, used in rows:
        if start <= s < end:
            cpu_us += used
            covered += length
    return cpu_us, covered


def cpu_figures(
    workers: Sequence[tuple[str, str]],
    info: dict[str, dict[str, Any]],
    cpu_rows: dict[str, list[list[int]]],
    hosts: dict[str, str],
    periods: dict[str, tuple[int | None, int | None]],
    cpu_section: dict[str, Any],
) -> tuple[list[dict[str, Any]], dict[str, str]]:
    """One entry per node (client nodes, then broker nodes) and {node: why unknown}.

    ``info``: worker id -> worker.json figures (node, cores); ``cpu_rows``: worker id
    (``broker-NN`` for a broker node) -> [start_ms, length_ms, cpu_us] rows;
    ``periods``: role -> (start, end) of its measured period."""
    nodes: dict[str, dict[str, Any]] = {}
    unknown: dict[str, str] = {}
    for wid, role in workers:
        w = info.get(wid, {})
        key = _node_key(wid, role, w.get("node"))
        n = nodes.setdefault(
            key,
            {"node": key, "role": role, "host": hosts.get(wid, ""), "processes": 0},
        )
        n["processes"] += 1
        n.setdefault("_parts", []).append((wid, w.get("cores")))
    starts = [p[0] for p in periods.values() if p[0] is not None]
    ends = [p[1] for p in periods.values() if p[1] is not None]
    periods = {**periods, "broker": (min(starts, default=None), max(ends, default=None))}
    if cpu_section.get("brokers_recorded"):
        for wid in sorted(w for w in cpu_rows if w.startswith("broker-")):
            nodes[wid] = {
                "node": wid,
                "role": "broker",
                "host": "local",
                "processes": None,
                "_parts": [(wid, cpu_section.get("broker_cores"))],
            }
    out = []
    for key, n in nodes.items():
        parts = n.pop("_parts")
        cores = next((c for _w, c in parts if c), None)
        start, end = periods.get(n["role"], (None, None))
        used = [_cpu_of(cpu_rows[w], start, end) for w, _c in parts if w in cpu_rows]
        n.update(cores=cores, cpu_s=None, period_s=None, fraction=None)
        if len(used) < len(parts) or not cores:
            unknown[key] = (
                "CPU not recorded (a run from before mqlab recorded it, or a missing file)"
            )
        elif start is None or any(u is None for u in used):
            unknown[key] = f"nothing counted in the {n['role']}s' measured period"
        else:
            cpu_us = sum(u[0] for u in used if u)
            covered = max((u[1] for u in used if u), default=0)
            n.update(cpu_s=round(cpu_us / 1e6, 3), period_s=round(covered / 1000, 3))
            if covered:
                n["fraction"] = round(cpu_us / (covered * 1000 * cores), 4)
            else:
                unknown[key] = "no CPU interval in the measured period"
        out.append(n)
    return out, unknown


def host_figures(nodes: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per host: its cores, the client nodes' and the broker nodes' CPU fraction (None
    when a node on it is unknown, or none of that kind ran there) and their sum."""
    out = []
    for host in sorted({n["host"] for n in nodes}):
        on = [n for n in nodes if n["host"] == host]
        cores = next((n["cores"] for n in on if n["cores"]), None)
        row: dict[str, Any] = {"host": host, "cores": cores, "client_nodes": 0}
        for kind, mine in (
            ("clients", [n for n in on if n["role"] != "broker"]),
            ("brokers", [n for n in on if n["role"] == "broker"]),
        ):
            if kind == "clients":
                row["client_nodes"] = len(mine)
            known = mine and all(n["cpu_s"] is not None and n["period_s"] for n in mine)
            if not known or not cores:
                row[f"{kind}_fraction"] = None
                continue
            covered = max(n["period_s"] for n in mine)
            row[f"{kind}_fraction"] = round(sum(n["cpu_s"] for n in mine) / (covered * cores), 4)
        parts = [row["clients_fraction"], row["brokers_fraction"]]
        row["fraction"] = (
            round(sum(p for p in parts if p is not None), 4)
            if any(p is not None for p in parts)
            else None
        )
        out.append(row)
    return out


def _in_fault(second_ms: int, faults: Sequence[dict[str, Any]], run_end_ms: int) -> bool:
    for f in faults:
        start = f.get("start_ms")
        if start is None:
            continue
        end = int(f["end_ms"]) if f.get("end_ms") is not None else run_end_ms
        if start - 1000 < second_ms <= end + FAULT_GRACE_MS:
            return True
    return False


def sender_lag_ms(
    timeline: Sequence[dict[str, Any]],
    send: tuple[int | None, int | None],
    faults: Sequence[dict[str, Any]],
) -> int:
    """The most the fixed-rate senders were behind their schedule at the end of a second
    of the sender's measured period outside the faults (0 in closed loop)."""
    start, end = send
    if start is None or end is None:
        return 0
    last = max((r["second_ms"] for r in timeline), default=end)
    return max(
        (
            int(r["sender_lag_ms"])
            for r in timeline
            if start - 999 <= r["second_ms"] < end and not _in_fault(r["second_ms"], faults, last)
        ),
        default=0,
    )


def concurrency(
    busy: Sequence[Sequence[float]],
    send: tuple[int | None, int | None],
    faults: Sequence[dict[str, Any]],
) -> tuple[float | None, int, float]:
    """(effective concurrency, batches, seconds) over the seconds of the sender's
    measured period outside the faults; ``busy``: per second, ``[start_ms, end_ms,
    batches, busy_us]`` (partials' ``bsy``). None when no batch was confirmed there."""
    start, end = send
    if start is None or end is None:
        return None, 0, 0.0
    last = max((int(b[1]) for b in busy), default=end)
    batches, busy_us, ms = 0, 0.0, 0
    for b0, b1, n, us in busy:
        second = int(b0) - int(b0) % 1000
        if not start - 999 <= second < end or _in_fault(second, faults, last):
            continue
        ms += max(0, min(int(b1), end) - max(int(b0), start))
        batches += int(n)
        busy_us += us
    if not batches or not ms:
        return None, batches, ms / 1000
    return round(busy_us / (ms * 1000), 2), batches, ms / 1000


def slope(values: Sequence[float]) -> float:
    """The least-squares slope of ``values`` over their indexes (per second here)."""
    n = len(values)
    mean_x, mean_y = (n - 1) / 2, sum(values) / n
    sxx = sum((i - mean_x) ** 2 for i in range(n))
    return sum((i - mean_x) * (v - mean_y) for i, v in enumerate(values)) / sxx


def backlog_figures(
    timeline: Sequence[dict[str, Any]], send: tuple[int | None, int | None]
) -> dict[str, Any] | None:
    """The backlog through the sender's measured period: at its first and last second, its
    trend (least-squares slope, messages a second) and the trend that marks receivers
    behind (``BACKLOG_LIMIT`` of the messages confirmed a second)."""
    start, end = send
    if start is None or end is None:
        return None
    rows = [r for r in timeline if start - 999 <= r["second_ms"] < end]
    if len(rows) < 2:
        return None
    confirmed = sum(r["confirmed"] for r in rows)
    trend = slope([r["backlog"] for r in rows])
    return {
        "start": rows[0]["backlog"],
        "end": rows[-1]["backlog"],
        "per_s": round(trend, 1),
        "growth": round(trend * (len(rows) - 1)),
        "limit_per_s": round(BACKLOG_LIMIT * confirmed / len(rows), 1),
        "seconds": len(rows),
        "confirmed": confirmed,
        "received": sum(r["received"] for r in rows),
    }


def behind_limit(nodes: Sequence[dict[str, Any]], hosts: Sequence[dict[str, Any]]) -> str | None:
    """What held receivers that fell behind, from the CPU figures (None: a receiver
    node's CPU is not known): the receiver nodes' CPU, a receiver node's processes (one
    interpreter each, a core at most), the brokers', a host's (everything on it
    together), or none of them, so each receive waited for the broker."""
    receivers = [n for n in nodes if n["role"] == "receiver"]
    recv = [n["fraction"] for n in receivers]
    if not recv or any(f is None for f in recv):
        return None
    if max(recv) > CPU_LIMIT:
        return f"the receiver nodes' CPU held them (up to {_percent(max(recv))} of their cores)"
    for n in receivers:
        used, procs = n["fraction"] * (n.get("cores") or 0), n.get("processes", 1)
        if used > CPU_LIMIT * procs:
            return (
                f"{n['node']}'s processes held them ({used:.2f} cores over {procs} "
                f"process{'' if procs == 1 else 'es'}, one interpreter each)"
            )
    brokers = [n["fraction"] for n in nodes if n["role"] == "broker"]
    broker = max(brokers) if brokers and all(f is not None for f in brokers) else None
    if broker is not None and broker > CPU_LIMIT:
        return f"the brokers' CPU held them (up to {_percent(broker)} of their cores)"
    full = [h for h in hosts if h["fraction"] is not None and h["fraction"] > CPU_LIMIT]
    if full:
        h = max(full, key=lambda h: h["fraction"])
        return (
            f"host {h['host']}'s CPU held them ({_percent(h['fraction'])} of its {h['cores']} "
            "cores, clients and brokers together)"
        )
    brokers_said = (
        f"the brokers at most {_percent(broker)}"
        if broker is not None
        else "the brokers' CPU not recorded"
    )
    return (
        f"not CPU: the receiver nodes used at most {_percent(max(recv))} of their cores, "
        f"{brokers_said}; each receive waited for the broker's answer (its round trip and "
        "whatever the broker does before it answers, such as a replicated commit)"
    )


def figures(
    nodes: Sequence[dict[str, Any]],
    cpu_unknown: dict[str, str],
    timeline: Sequence[dict[str, Any]],
    periods: dict[str, tuple[int | None, int | None]],
    faults: Sequence[dict[str, Any]],
    shared_cores: bool,
    has_receivers: bool,
    busy: Sequence[Sequence[float]] | None = None,
    senders: int | None = None,
) -> dict[str, Any]:
    """The run's ``saturation`` section (summary.json) from its node figures; ``busy``
    (closed loop, every sender's send latency log read: else None) and ``senders`` give
    the effective concurrency."""
    hosts = host_figures(nodes)
    why: list[str] = []
    clients = [n for n in nodes if n["role"] != "broker"]
    over = [n for n in clients if n["fraction"] is not None and n["fraction"] > CPU_LIMIT]
    for n in over:
        why.append(f"{n['node']} used {_percent(n['fraction'])} of its {n['cores']} cores")
    for h in hosts:
        f = h["clients_fraction"]
        alone = any(n["host"] == h["host"] for n in over)  # said already, node by node
        if h["client_nodes"] > 1 and f is not None and f > CPU_LIMIT and not alone:
            why.append(
                f"the {h['client_nodes']} client nodes on {h['host']} used {_percent(f)} "
                f"of its {h['cores']} cores together"
            )
    lag = sender_lag_ms(timeline, periods["sender"], faults)
    if lag > LAG_LIMIT_MS:
        why.append(f"fixed-rate senders fell {lag / 1000:.1f} s behind their schedule")
    effective = None
    if busy is not None:
        effective = concurrency(busy, periods["sender"], faults)[0]
    if effective is not None and senders and effective < CONCURRENCY_LIMIT * senders:
        why.append(
            f"closed-loop senders kept {effective:.2f} of {senders} batches in flight "
            "(Little's law)"
        )
    client_unknown = [n["node"] for n in clients if n["node"] in cpu_unknown]
    client_bound: bool | None = bool(why) or (None if client_unknown else False)
    backlog = backlog_figures(timeline, periods["sender"])
    behind: bool | None = None
    behind_why = None
    if has_receivers and backlog is not None:
        behind = backlog["per_s"] > backlog["limit_per_s"] and backlog["growth"] > BACKLOG_MIN
        if behind:
            secs = backlog["seconds"]
            behind_why = (
                f"the backlog grew by {backlog['per_s']:,.0f} messages a second through the "
                f"measured period, from {backlog['start']:,} to {backlog['end']:,} (receivers "
                f"took {backlog['received'] / secs:,.0f} of the "
                f"{backlog['confirmed'] / secs:,.0f} msgs/s confirmed)"
            )
            limit = behind_limit(nodes, hosts)
            if limit is not None:
                behind_why += "; " + limit
    known = [n["fraction"] for n in clients if n["fraction"] is not None]
    brokers = [n["fraction"] for n in nodes if n["role"] == "broker" and n["fraction"] is not None]
    return {
        "nodes": list(nodes),
        "hosts": hosts,
        "cpu_limit": CPU_LIMIT,
        "client_cpu_max": max(known) if known else None,
        "broker_cpu_max": max(brokers) if brokers else None,
        "sender_lag_ms": lag,
        "senders": senders,
        "effective_concurrency": effective,
        "concurrency_limit": CONCURRENCY_LIMIT,
        "client_bound": client_bound,
        "client_bound_why": why,
        "receivers_behind": behind,
        "receivers_behind_why": behind_why,
        "backlog": backlog,
        "shared_cores": shared_cores,
        "unknown": dict(sorted(cpu_unknown.items())),
    }


def as_json(section: dict[str, Any]) -> str:
    return json.dumps(section, sort_keys=True)


def marks(figures: dict[str, Any] | None, stand_in: str | None = None) -> list[str]:
    """The run's marks, from its saturation section or its ``runs`` row (and what served
    instead of the real system, if a stand-in did): what a table shows beside its figures
    so that nobody quotes them as the broker's."""
    f = figures or {}
    out = ["stand-in"] if stand_in else []
    if f.get("client_bound"):
        out.append("client-bound")
    if f.get("receivers_behind"):
        out.append("receivers behind")
    return out


def explain(section: dict[str, Any] | None) -> list[str]:
    """Sentences for a report: the marks and why (or why not), and the shared machine."""
    if not section:
        return ["Not known: this run was summarized before mqlab recorded CPU and backlog."]
    out = []
    if section.get("client_bound"):
        out.append(
            "**Client-bound:** "
            + "; ".join(section.get("client_bound_why") or [])
            + ". Its throughput and latencies are the load generator's limit, not the broker's."
        )
    if section.get("receivers_behind"):
        out.append(
            f"**Receivers behind:** {section.get('receivers_behind_why')}. Its processing "
            "latency is mostly time queued in the broker, not the broker's delivery time."
        )
    if not out:
        top = section.get("client_cpu_max")
        lag = section.get("sender_lag_ms") or 0
        busiest = f"busiest {_percent(top)}" if top is not None else "CPU not recorded"
        parts = [
            f"no client node above {_percent(CPU_LIMIT)} of its cores ({busiest})",
            f"fixed-rate senders at most {lag:,} ms behind their schedule"
            if lag
            else "no sender behind a fixed-rate schedule",
        ]
        b = section.get("backlog")
        if b:
            parts.append(f"backlog {b['start']:,} → {b['end']:,} messages")
        known = section.get("client_bound") is not None
        out.append(
            ("Not marked: " if known else "Not marked (CPU not recorded for every client node): ")
            + "; ".join(parts)
            + "."
        )
    if section.get("shared_cores"):
        hosts = section.get("hosts") or []
        h = next((x for x in hosts if x.get("brokers_fraction") is not None), None)
        h = h or (hosts[0] if hosts else {})
        used = []
        if h.get("clients_fraction") is not None:
            used.append(f"client processes used {_percent(h['clients_fraction'])} of them")
        if h.get("brokers_fraction") is not None:
            used.append(f"broker processes {_percent(h['brokers_fraction'])}")
        out.append(
            f"Brokers and clients shared the cores of one machine ({h.get('cores') or '?'})"
            + (": " + ", ".join(used) if used else "")
            + ". Every figure here is that machine's, not the broker's alone."
        )
    return out
