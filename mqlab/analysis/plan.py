"""What a run archive says about itself (manifest, scenario, workers), and the raw files
the summary reads: one task per file. Reads only small files (the job's driver plans with
it)."""

from __future__ import annotations

import json
import logging
import re
import tomllib
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from mqlab.analysis.partials import Task
from mqlab.archive import layout
from mqlab.archive.records import read_manifest

LOG = logging.getLogger(__name__)
RECORD = {"sender": (layout.SENT, "sent"), "receiver": (layout.DELIVERY, "delivery")}
# scenario keys we read, with the spellings accepted (first found wins, [workload] first)
SCENARIO_KEYS = {
    "message_bytes": ("message_bytes", "message_size", "size_bytes"),
    "batch": ("send_batch_max", "batch", "batch_size", "max_batch"),
}
_NAME_RE = re.compile(
    r"^(?P<stamp>\d{4}-\d\d-\d\dT\d\d-\d\d-\d\dZ)_(?P<scenario>.+)_(?P<profile>[^_]+)_"
    r"(?P<st>\d+)(?:x(?P<rt>\d+))?t-(?P<s>\d+)s-(?P<r>\d+)r(?P<rest>(?:_.+)?)$"
)


@dataclass(frozen=True)
class RunMeta:
    run_id: str
    run_dir: str
    scenario: str
    broker: str
    profile: str
    sender_threads: int
    receiver_threads: int
    sender_nodes: int
    receiver_nodes: int
    # worker processes per client node (the most on any node, should nodes differ);
    # sender_threads / receiver_threads are per process (the most of any process, should
    # a node's threads not split evenly over its processes)
    sender_processes: int
    receiver_processes: int
    # every sender thread of the run: the threads of its sender workers (worker.json),
    # a worker without one counted as sender_threads
    senders: int
    # workload.queues: queues the run spread over (1 in archives from before it existed)
    queues: int
    message_bytes: int | None
    batch: int | None
    status: str
    end_reason: str
    started_at: str
    ended_at: str
    measure_start_ms: int
    warmup_end_ms: int
    measure_end_ms: int
    mqlab_version: str
    git_commit: str
    cluster_target: str
    host_cpu_model: str
    sweep: str  # the varied fields of a sweep point, e.g. "message_bytes-100", or ""
    # the manifest's clock section (records.ClockInfo): the worst error bound of a
    # corrected end-to-end latency between hosts, None when not known (clock_unknown: why)
    clock_method: str = ""
    clock_bound_ms: float | None = None
    clock_budget_ms: float | None = None
    clock_within_budget: bool | None = None
    clock_hosts: str = "{}"  # JSON: host -> {offset_ms, bound_ms, drift_ms}
    clock_unknown: str | None = None
    # the manifest's lab section (records.LabInfo)
    lab_kind: str = ""
    lab_name: str = ""
    price_per_hour_usd: float | None = None
    workers: list[tuple[str, str]] = field(default_factory=list)  # (worker id, role)
    faults: str = "[]"  # JSON: the manifest's fault log
    # JSON: worker id -> the host it ran on (the manifest's worker list)
    worker_hosts: str = "{}"
    # JSON: the manifest's cpu section ({"brokers_recorded", "broker_cores" | "why"}),
    # {} in runs from before CPU was recorded
    cpu: str = "{}"
    # what served instead of the real system (a local stand-in), "" for the real one
    stand_in: str = ""
    # workload.order of the archived scenario: "strict" holds the run to its receivers
    # getting each sender's messages in order ("any" in archives from before the key)
    order_requirement: str = "any"
    # workload.mode of the archived scenario ("closed_loop", its default, or "fixed_rate")
    mode: str = "closed_loop"
    cpu_workers: list[str] = field(default_factory=list)  # workers whose cpu.csv to read
    broker_cpu_nodes: list[int] = field(default_factory=list)  # brokers/node-NN to read

    def fault_log(self) -> list[dict[str, Any]]:
        return list(json.loads(self.faults or "[]"))

    def row(self) -> dict[str, Any]:
        """The run's columns of the ``runs`` table (reasons go to ``context_unknown``)."""
        d = asdict(self)
        for k in ("workers", "faults", "clock_unknown", "worker_hosts", "cpu", "mode"):
            d.pop(k)
        for k in ("cpu_workers", "broker_cpu_nodes"):
            d.pop(k)
        return d


def _find_key(doc: dict[str, Any], names: tuple[str, ...]) -> Any:
    sections = [doc.get("workload", {})] if isinstance(doc.get("workload"), dict) else []
    sections.append(doc)
    stack = list(doc.values())
    while stack:
        v = stack.pop(0)
        if isinstance(v, dict):
            sections.append(v)
            stack.extend(v.values())
    for sec in sections:
        for n in names:
            if n in sec and isinstance(sec[n], int | float):
                return sec[n]
    return None


def read_run(run_dir: Path | str) -> RunMeta:
    run_dir = Path(run_dir).resolve()
    man = read_manifest(run_dir / layout.MANIFEST)
    try:
        scenario = tomllib.loads((run_dir / layout.SCENARIO).read_text())
    except (OSError, tomllib.TOMLDecodeError) as err:
        LOG.warning("%s: scenario.toml unreadable (%s); using the directory name", run_dir, err)
        scenario = {}
    m = _NAME_RE.match(run_dir.name)
    workers = _workers(run_dir, man.workers)
    wjson = {wid: _worker_json(run_dir / layout.WORKERS / wid) for wid, _ in workers}

    def threads(role: str, fallback: str | None) -> int:
        known = [
            int(wjson[w]["threads"]) for w, r in workers if r == role and _has_threads(wjson[w])
        ]
        if known:
            return max(known)
        v = _find_key(scenario, (f"{role}_threads",))
        return int(v if v is not None else (fallback or 0))

    def node_of(wid: str) -> Any:
        node = wjson[wid].get("node")
        if node is None:  # no worker.json: the node its id names, else a node of its own
            node = layout.parse_worker_id(wid)[1]
        return wid if node is None else int(node)

    def per_node(role: str) -> Counter[Any]:
        return Counter(node_of(w) for w, r in workers if r == role)

    def nodes(role: str) -> int:
        return len(per_node(role))

    def processes(role: str) -> int:
        return max(per_node(role).values(), default=0)

    st = threads("sender", m.group("st") if m else None)
    rt = threads("receiver", (m.group("rt") or m.group("st")) if m else None)
    senders = sum(
        int(wjson[w]["threads"]) if _has_threads(wjson[w]) else st
        for w, r in workers
        if r == "sender"
    )
    msg_bytes = _find_key(scenario, SCENARIO_KEYS["message_bytes"])
    batch = _find_key(scenario, SCENARIO_KEYS["batch"])
    return RunMeta(
        run_id=man.run_id,
        run_dir=str(run_dir),
        scenario=str(scenario.get("name") or (m.group("scenario") if m else "")),
        broker=man.broker or str(scenario.get("broker") or ""),
        profile=man.profile or (m.group("profile") if m else ""),
        sender_threads=st,
        receiver_threads=rt,
        sender_nodes=nodes("sender"),
        receiver_nodes=nodes("receiver"),
        sender_processes=processes("sender"),
        receiver_processes=processes("receiver"),
        senders=senders,
        queues=man.queues,
        message_bytes=int(msg_bytes) if msg_bytes is not None else None,
        batch=int(batch) if batch is not None else None,
        status=man.status,
        end_reason=man.end_reason,
        started_at=man.started_at,
        ended_at=man.ended_at,
        measure_start_ms=man.measure_start_ms or 0,
        warmup_end_ms=man.warmup_end_ms or 0,
        measure_end_ms=man.measure_end_ms or 0,
        mqlab_version=man.mqlab_version,
        git_commit=man.git_commit,
        cluster_target=man.cluster_target,
        host_cpu_model=man.host_cpu_model,
        sweep=(m.group("rest") or "").lstrip("_") if m else "",
        clock_method=man.clock.method,
        clock_bound_ms=man.clock.bound_ms,
        clock_budget_ms=man.clock.budget_ms,
        clock_within_budget=man.clock.within_budget,
        clock_hosts=json.dumps(man.clock.hosts, sort_keys=True),
        clock_unknown=man.clock.unknown,
        lab_kind=man.lab.kind,
        lab_name=man.lab.name,
        price_per_hour_usd=man.lab.price_per_hour_usd,
        workers=workers,
        faults=json.dumps(
            [f for f in (man.raw.get("faults") or []) if isinstance(f, dict)], sort_keys=True
        ),
        stand_in=stand_in_of(man.raw),
        order_requirement=order_of(scenario),
        mode=mode_of(scenario),
        **_cpu_meta(run_dir, man.raw, wjson),
    )


def order_of(scenario: dict[str, Any]) -> str:
    """The archived scenario's ``workload.order`` ("any" when it has none)."""
    workload = scenario.get("workload")
    order = workload.get("order") if isinstance(workload, dict) else None
    return order if isinstance(order, str) and order else "any"


def mode_of(scenario: dict[str, Any]) -> str:
    """The archived scenario's ``workload.mode`` ("closed_loop" when it has none)."""
    workload = scenario.get("workload")
    mode = workload.get("mode") if isinstance(workload, dict) else None
    return mode if isinstance(mode, str) and mode else "closed_loop"


def _has_threads(doc: dict[str, Any]) -> bool:
    return isinstance(doc.get("threads"), int)


def stand_in_of(manifest: dict[str, Any]) -> str:
    """What served instead of the real system: the manifest's ``broker.stand_in``; in
    archives from before it was recorded, a server version that says it is a stand-in or
    an emulator (as mqlab's stand-ins have always reported themselves)."""
    raw = manifest.get("broker")
    broker: dict[str, Any] = raw if isinstance(raw, dict) else {}
    if "stand_in" in broker:
        return str(broker.get("stand_in") or "")
    for v in broker.get("server_versions") or []:
        if isinstance(v, str) and ("stand-in" in v or "emulator" in v):
            return v
    return ""


def _cpu_meta(
    run_dir: Path, manifest: dict[str, Any], wjson: dict[str, dict[str, Any]]
) -> dict[str, Any]:
    """What the run recorded of its CPU: a worker's cpu.csv is expected when its
    worker.json names its cores (mqlab writes both since it records CPU); a broker node's
    when the manifest says brokers were recorded."""
    hosts = {
        str(w["id"]): str(w.get("host") or "")
        for w in manifest.get("workers") or []
        if isinstance(w, dict) and "id" in w
    }
    raw = manifest.get("cpu")
    section: dict[str, Any] = raw if isinstance(raw, dict) else {}
    expected = [int(n) for n in section.get("broker_nodes") or []]
    found = [
        int(p.name.removeprefix("node-"))
        for p in layout.broker_dirs(run_dir)
        if p.name.removeprefix("node-").isdigit()
    ]
    return {
        "worker_hosts": json.dumps(hosts, sort_keys=True),
        "cpu": json.dumps(section, sort_keys=True),
        "cpu_workers": sorted(w for w, doc in wjson.items() if doc.get("cores") is not None),
        "broker_cpu_nodes": sorted(set(found) | set(expected))
        if section.get("brokers_recorded")
        else [],
    }


def _workers(run_dir: Path, listed: list[dict[str, Any]]) -> list[tuple[str, str]]:
    found: dict[str, str] = {}
    for w in listed:
        found[str(w["id"])] = str(w.get("role", ""))
    wdir = run_dir / "workers"
    if wdir.is_dir():
        for d in sorted(wdir.iterdir()):
            if d.is_dir() and d.name not in found:
                found[d.name] = ""
    out = []
    for wid, role in sorted(found.items()):
        if not role:
            role = str(_worker_json(wdir / wid).get("role") or wid.split("-")[0])
        out.append((wid, role))
    return out


def _worker_json(wdir: Path) -> dict[str, Any]:
    try:
        doc = json.loads((wdir / "worker.json").read_text())
        return doc if isinstance(doc, dict) else {}
    except (OSError, ValueError):
        return {}


def tasks_for(meta: RunMeta, window_ms: int) -> list[Task]:
    """One task per raw file the archive format says the run has (a missing file becomes
    a counted problem, and the figures that need it are unknown)."""
    run = Path(meta.run_dir)
    out = [Task("undrained", meta.run_id, str(run / layout.UNDRAINED))]
    for wid, role in meta.workers:
        wdir = run / layout.WORKERS / wid
        for metric in layout.LOGS.get(role, ()):
            path = str(layout.log_file(wdir, metric))
            out.append(Task("hlog", meta.run_id, path, metric, meta.warmup_end_ms, window_ms, wid))
        counts = str(wdir / layout.COUNTS)
        out.append(Task("counts", meta.run_id, counts, role, meta.warmup_end_ms, window_ms, wid))
        if wid in meta.cpu_workers:
            cpu = str(wdir / layout.CPU)
            out.append(Task("cpu", meta.run_id, cpu, role, meta.warmup_end_ms, window_ms, wid))
        if role in RECORD:
            name, kind = RECORD[role]
            out.append(Task(kind, meta.run_id, str(wdir / name), worker_id=wid))
        out.append(Task("worker", meta.run_id, str(wdir / layout.WORKER), worker_id=wid))
    for node in meta.broker_cpu_nodes:
        path = str(layout.broker_dir(run, node) / layout.CPU)
        bid = f"broker-{node:02d}"
        out.append(Task("cpu", meta.run_id, path, "broker", meta.warmup_end_ms, window_ms, bid))
    return out


def find_runs(results_dir: Path | str) -> list[Path]:
    return layout.find_runs(results_dir)
