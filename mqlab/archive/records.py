"""Typed records of a run: ``worker.json``, ``sent.json``, ``delivery.json``,
``undrained.json``. Each has one writer and one reader, used by workers, the
coordinator, the summary and the test fixtures alike.

Readers raise a one-line :class:`ArchiveError` naming the file and what is wrong.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from pyroaring import BitMap64

from mqlab.archive.codecs import decode_bitmap, encode_bitmap
from mqlab.archive.formats import read_json, write_json
from mqlab.errors import ArchiveError


def _bad(path: Path | str, what: str, err: Exception) -> ArchiveError:
    return ArchiveError(f"{path}: {what}: {type(err).__name__}: {err}")


# -- sent.json (senders) -----------------------------------------------------------
@dataclass
class SentSender:
    """One sender id (one sender thread): what it did with its sequence numbers."""

    sent: int = 0  # handed to send()
    confirmed: int = 0  # send() returned
    failed: int = 0  # send() raised
    unsent: int = 0  # scheduled before the stop but never handed to send() (fixed rate)
    confirmed_seqs: BitMap64 = field(default_factory=BitMap64)
    # [wall-clock second (ms), first seq handed to send() in it], one per second with a
    # send; None in archives written before marks existed
    marks: list[list[int]] | None = None

    def to_json(self) -> dict[str, Any]:
        out = {
            "sent": self.sent,
            "confirmed": self.confirmed,
            "failed": self.failed,
            "unsent": self.unsent,
            "confirmed_bitmap": encode_bitmap(self.confirmed_seqs),
        }
        if self.marks is not None:
            out["marks"] = [[int(s), int(q)] for s, q in self.marks]
        return out

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> SentSender:
        return cls(
            int(d["sent"]),
            int(d["confirmed"]),
            int(d["failed"]),
            int(d["unsent"]),
            decode_bitmap(d["confirmed_bitmap"]),
            [[int(s), int(q)] for s, q in d["marks"]] if d.get("marks") is not None else None,
        )


def write_sent(path: Path | str, senders: dict[int, SentSender]) -> None:
    write_json(path, {"senders": {str(k): v.to_json() for k, v in sorted(senders.items())}})


def read_sent(path: Path | str) -> dict[int, SentSender]:
    doc = read_json(path)
    try:
        return {int(k): SentSender.from_json(v) for k, v in doc["senders"].items()}
    except (KeyError, ValueError, TypeError, AttributeError) as e:
        raise _bad(path, "not a sent.json record", e) from None


# -- delivery.json (receivers) -----------------------------------------------------
@dataclass
class ReceivedSender:
    """What one receiver node got of one sender id's messages."""

    received: int = 0  # every delivery, duplicates and redeliveries included
    first_received: int = 0  # deliveries of a seq this node had not seen, not flagged again
    redelivered: int = 0  # deliveries the broker flagged as redelivered
    reordered: int = 0  # per receiver thread: first deliveries out of place (n - LIS)
    seqs: BitMap64 = field(default_factory=BitMap64)  # distinct seqs received
    # seqs this node received more than once; None: a record from before it was kept
    again: BitMap64 | None = field(default_factory=BitMap64)

    def to_json(self) -> dict[str, Any]:
        out = {
            "received": self.received,
            "first_received": self.first_received,
            "redelivered": self.redelivered,
            "reordered": self.reordered,
            "bitmap": encode_bitmap(self.seqs),
        }
        if self.again is not None:
            out["again_bitmap"] = encode_bitmap(self.again)
        return out

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> ReceivedSender:
        return cls(
            int(d["received"]),
            int(d["first_received"]),
            int(d["redelivered"]),
            int(d["reordered"]),
            decode_bitmap(d["bitmap"]),
            decode_bitmap(d["again_bitmap"]) if "again_bitmap" in d else None,
        )


@dataclass
class DeliveryRecord:
    senders: dict[int, ReceivedSender]
    foreign: int = 0  # messages whose header did not decode (not mqlab's, or corrupt)


def write_delivery(path: Path | str, rec: DeliveryRecord) -> None:
    write_json(
        path,
        {
            "senders": {str(k): v.to_json() for k, v in sorted(rec.senders.items())},
            "foreign": rec.foreign,
        },
    )


def read_delivery(path: Path | str) -> DeliveryRecord:
    doc = read_json(path)
    try:
        senders = {int(k): ReceivedSender.from_json(v) for k, v in doc["senders"].items()}
        return DeliveryRecord(senders, int(doc["foreign"]))
    except (KeyError, ValueError, TypeError, AttributeError) as e:
        raise _bad(path, "not a delivery.json record", e) from None


# -- undrained.json (the coordinator, after the receivers stopped) -------------------
@dataclass
class UndrainedRecord:
    """What the broker still held for the queue once every receiver had stopped.

    ``count``: as the broker reports it (ready + unacked), ``None`` if the check failed
    (``error`` says why). ``identified``: the messages were read without consuming them,
    and ``senders`` holds their seqs per sender id; otherwise only the count is known.
    With several queues (``workload.queues``) ``count`` and ``in_flight`` are sums over
    them and ``queues`` holds each queue's own ``{"count", "in_flight"}`` (``{"count":
    None, "error"}`` for one the broker did not answer for); empty for a single queue.
    """

    checked_ms: int
    count: int | None
    in_flight: int | None = None
    identified: bool = False
    senders: dict[int, BitMap64] = field(default_factory=dict)
    foreign: int = 0
    error: str | None = None
    queues: dict[str, dict[str, Any]] = field(default_factory=dict)


def write_undrained(path: Path | str, rec: UndrainedRecord) -> None:
    doc = asdict(rec)
    doc["senders"] = {str(k): encode_bitmap(v) for k, v in sorted(rec.senders.items())}
    if not rec.queues:  # one queue: the record as it always was
        doc.pop("queues")
    write_json(path, doc)


def read_undrained(path: Path | str) -> UndrainedRecord:
    doc = read_json(path)
    try:
        return UndrainedRecord(
            checked_ms=int(doc["checked_ms"]),
            count=None if doc["count"] is None else int(doc["count"]),
            in_flight=None if doc["in_flight"] is None else int(doc["in_flight"]),
            identified=bool(doc["identified"]),
            senders={int(k): decode_bitmap(v) for k, v in doc["senders"].items()},
            foreign=int(doc["foreign"]),
            error=doc["error"],
            queues={str(k): dict(v) for k, v in (doc.get("queues") or {}).items()},
        )
    except (KeyError, ValueError, TypeError, AttributeError) as e:
        raise _bad(path, "not an undrained.json record", e) from None


# -- worker.json -------------------------------------------------------------------
@dataclass
class WorkerRecord:
    """One worker process of a client node: how it ran and what it counted in total."""

    worker_id: str
    role: str
    node: int
    threads: int  # of this process
    sender_ids: list[int]
    started_ms: int  # the process started recording
    go_ms: int | None  # senders: the common start signal it sent on (None: never started)
    ended_ms: int
    status: str  # ok | failed | interrupted
    error: str | None
    messages: dict[str, int]  # totals of counts.csv's counters
    # per metric: values below 0 (clock steps, skew) and above the histogram's 1 h range,
    # each recorded clamped into the range and counted here
    out_of_range: dict[str, dict[str, int]]
    foreign: int = 0
    process: int = 0  # its index among its node's worker processes (0 in older records)
    # the cores its host let it use (os.sched_getaffinity); None in older records
    cores: int | None = None
    # senders: "compiled-lanes" (one thread drives all of them, in C), "compiled" (a
    # thread each, the batch in C) or "python"; None for receivers and older records
    send_path: str | None = None
    # receivers: "compiled-lanes" (one thread drives all of them, in C), "lanes" (one
    # thread, in Python) or "python" (a thread each); None for senders and older records
    receive_path: str | None = None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> WorkerRecord:
        names = cls.__dataclass_fields__
        # absent in records written before they existed
        optional = {"foreign", "process", "cores", "send_path", "receive_path"}
        return cls(
            **{k: d[k] for k in names if k not in optional},
            foreign=int(d.get("foreign", 0)),
            process=int(d.get("process", 0)),
            cores=int(d["cores"]) if d.get("cores") is not None else None,
            send_path=d.get("send_path"),
            receive_path=d.get("receive_path"),
        )


def write_worker(path: Path | str, rec: WorkerRecord) -> None:
    write_json(path, rec.to_json())


def read_worker(path: Path | str) -> WorkerRecord:
    doc = read_json(path)
    try:
        return WorkerRecord.from_json(doc)
    except (KeyError, ValueError, TypeError) as e:
        raise _bad(path, "not a worker.json record", e) from None


# -- manifest.json and summary.json -------------------------------------------------
NOT_MEASURED = "clock offsets between hosts were not measured"


@dataclass(frozen=True)
class ClockInfo:
    """The manifest's ``clock`` section (the shapes of :mod:`mqlab.hosts.clocks`).

    ``bound_ms``: the worst error bound of a corrected end-to-end latency between two
    hosts (0 on one host; None: not known, ``unknown`` says why). ``hosts``: host ->
    ``{"offset_ms", "bound_ms", "drift_ms"}`` as measured before the run (drift: how far
    the offset moved by its end; None when not measured again).
    """

    method: str
    bound_ms: float | None
    budget_ms: float | None
    within_budget: bool | None
    hosts: dict[str, dict[str, float | None]]
    unknown: str | None = None


@dataclass(frozen=True)
class LabInfo:
    """The manifest's ``lab`` section: where the run ran and what the lab costs an hour
    (None: no price, e.g. this machine)."""

    kind: str  # local | netns | ssh | aws
    name: str
    price_per_hour_usd: float | None
    hosts: dict[str, dict[str, Any]]


def _float(v: Any) -> float | None:
    return None if v is None else float(v)


def read_clock(d: dict[str, Any], target: str) -> ClockInfo:
    """The ``clock`` section of a manifest document, of any format-2 shape: the measured
    shape (``bound_ms``), the older one (``hosts: {"local": {"offset_ms", "error_bound_ms"}}``
    on one host, ``hosts: {}`` elsewhere), or none at all (a local run: one clock)."""
    sec = d.get("clock")
    sec = sec if isinstance(sec, dict) else None
    raw_hosts = sec.get("hosts") if sec is not None else None
    raw_hosts = raw_hosts if isinstance(raw_hosts, dict) else {}
    if sec is not None and "bound_ms" in sec:
        hosts: dict[str, dict[str, float | None]] = {}
        for host, e in raw_hosts.items():
            before = (e or {}).get("before") or {}
            hosts[str(host)] = {
                "offset_ms": _float(before.get("offset_ms")),
                "bound_ms": _float(before.get("bound_ms")),
                "drift_ms": _float((e or {}).get("drift_ms")),
            }
        bound = _float(sec["bound_ms"])
        within = sec.get("within_budget")
        return ClockInfo(
            method=str(sec.get("method") or ""),
            bound_ms=bound,
            budget_ms=_float(sec.get("budget_ms")),
            within_budget=None if within is None else bool(within),
            hosts=hosts,
            unknown=None if bound is not None else str(sec.get("note") or NOT_MEASURED),
        )
    if len(raw_hosts) == 1 or (sec is None and target == "local"):
        ((host, e),) = raw_hosts.items() if raw_hosts else (("local", {}),)
        hosts = {
            str(host): {
                "offset_ms": float((e or {}).get("offset_ms", 0.0)),
                "bound_ms": float((e or {}).get("error_bound_ms", 0.0)),
                "drift_ms": None,
            }
        }
        return ClockInfo("one host", 0.0, None, True, hosts)
    why = str(sec.get("note") or NOT_MEASURED) if sec is not None else "no clock section"
    return ClockInfo("not measured", None, None, None, {}, why)


def read_lab(d: dict[str, Any], target: str) -> LabInfo:
    """The ``lab`` section of a manifest document; an archive without one ran on
    ``cluster.target`` at no known price."""
    sec = d.get("lab")
    if not isinstance(sec, dict):
        return LabInfo(target or "local", target or "local", None, {})
    hosts = sec.get("hosts")
    return LabInfo(
        kind=str(sec.get("kind") or target or ""),
        name=str(sec.get("name") or ""),
        price_per_hour_usd=_float(sec.get("price_per_hour_usd")),
        hosts={str(k): dict(v) for k, v in hosts.items()} if isinstance(hosts, dict) else {},
    )


@dataclass(frozen=True)
class Manifest:
    """What a run says about itself (the fields the summary and reports use; ``raw`` has
    the whole record: versions, host, clock, faults)."""

    run_id: str
    status: str  # complete | partial
    end_reason: str
    started_at: str
    ended_at: str
    measure_start_ms: int | None  # the senders' common start
    warmup_end_ms: int | None
    measure_end_ms: int | None
    broker: str
    profile: str
    cluster_target: str
    mqlab_version: str
    git_commit: str
    host_cpu_model: str
    workers: list[dict[str, Any]]
    drain: dict[str, Any] | None
    raw: dict[str, Any]
    clock: ClockInfo = ClockInfo("not measured", None, None, None, {}, "no clock section")
    lab: LabInfo = LabInfo("local", "local", None, {})
    queues: int = 1  # workload.queues (1 in manifests from before it was recorded)


def read_manifest(path: Path | str) -> Manifest:
    d = read_json(path)

    def section(name: str) -> dict[str, Any]:
        v = d.get(name)
        return v if isinstance(v, dict) else {}

    def ms(v: Any) -> int | None:
        return None if v is None else int(v)

    try:
        measure = section("measure")
        target = str(section("cluster").get("target") or "")
        return Manifest(
            run_id=str(d.get("run_id") or Path(path).parent.name),
            status=str(d.get("status", "")),
            end_reason=str(d.get("end_reason", "")),
            started_at=str(d.get("started_at") or ""),
            ended_at=str(d.get("ended_at") or ""),
            measure_start_ms=ms(measure.get("start_ms")),
            warmup_end_ms=ms(measure.get("warmup_end_ms", measure.get("start_ms"))),
            measure_end_ms=ms(measure.get("end_ms")),
            broker=str(section("broker").get("name") or ""),
            profile=str(section("broker").get("profile") or ""),
            cluster_target=target,
            mqlab_version=str(section("mqlab").get("version") or ""),
            git_commit=str(section("mqlab").get("git_commit") or ""),
            host_cpu_model=str(section("host").get("cpu_model") or ""),
            workers=[dict(w) for w in d.get("workers") or []],
            drain=d.get("drain"),
            raw=d,
            clock=read_clock(d, target),
            lab=read_lab(d, target),
            queues=int(d.get("queues") or 1),
        )
    except (ValueError, TypeError, AttributeError) as e:
        raise _bad(path, "not a manifest.json record", e) from None


@dataclass(frozen=True)
class Summary:
    """A run's figures as ``summary.json`` has them (see docs/archive-format.md)."""

    run_id: str
    status: str
    throughput: dict[str, float | None]
    latency_us: dict[str, dict[str, float | int]]
    delivery: dict[str, int | None]  # None: unknown, and ``unknown`` says why
    unknown: dict[str, str]
    raw: dict[str, Any]


def read_summary(path: Path | str) -> Summary:
    d = read_json(path)
    try:
        return Summary(
            run_id=str(d["run_id"]),
            status=str(d["status"]),
            throughput=dict(d["throughput"]),
            latency_us={m: dict(f) for m, f in d["latency_us"].items()},
            delivery=dict(d["delivery"]),
            unknown=dict(d["unknown"]),
            raw=d,
        )
    except (KeyError, ValueError, TypeError, AttributeError) as e:
        raise _bad(path, "not a summary.json record", e) from None
