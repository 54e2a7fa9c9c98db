"""The phases of one run: setup → receivers → senders → measure → drain → teardown → archive.

``execute(scenarios)`` runs every sweep point in order, reusing one local cluster
per broker for the whole sweep (or the one `mqlab cluster up` left running).

- Receivers start first; senders connect, and once every worker is ready all
  senders start on one signal (the control file ``go``): the measured run starts
  there, so imports and connects never eat the warm-up.
- After the senders stop, receivers drain until the broker holds nothing for the
  queue (asked every half second, twice in a row), or until the drain deadline
  (``drain_timeout_s``; by default twice the profile's redelivery timeout + 10 s).
- Then the broker is asked once more what it still holds (``undrained.json``), and
  the run is summarized in process (``summary.json``, Parquet, the catalog).

Ctrl-C or a failed worker still leaves a valid archive, marked partial.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import json
import logging
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pyroaring import BitMap64

from mqlab import scenario as scenario_mod
from mqlab import typed
from mqlab.clusters import local
from mqlab.clusters.base import LocalCluster
from mqlab.drivers import registry
from mqlab.drivers.base import Driver
from mqlab.errors import ClusterError, MqlabError, ScenarioError
from mqlab.results.archive import layout
from mqlab.results.archive.formats import read_json, write_json
from mqlab.results.archive.manifest import base_manifest
from mqlab.results.archive.records import UndrainedRecord, write_undrained
from mqlab.results.summary.job import summarize_run
from mqlab.scenario import Scenario
from mqlab.signals import sigterm_as_interrupt
from mqlab.workload import envelope
from mqlab.workload.spec import WorkerSpec

LOG = logging.getLogger(__name__)
READY_TIMEOUT_S = 90.0
STOP_GRACE_S = 30.0
DRAIN_CHECK_S = 0.5  # how often the broker is asked whether anything is left


class Observer:
    """How a run reports progress; the CLI subclasses it to draw (only cli.py prints)."""

    def phase(self, text: str) -> None: ...

    def progress(self, elapsed_s: float, totals: dict[str, int], expected: int | None) -> None: ...

    def finished(self, result: RunResult) -> None: ...


@dataclass(frozen=True)
class RunResult:
    scenario: Scenario
    run_dir: Path
    status: str
    end_reason: str
    summary: dict[str, Any]


@dataclass
class _Worker:
    spec: WorkerSpec
    proc: subprocess.Popen[bytes]
    dir: Path

    @property
    def done(self) -> bool:
        return self.proc.poll() is not None


class ClusterPool:
    """Local clusters for a sequence of runs: reuse a running one, else start and later stop."""

    def __init__(self, observer: Observer):
        self.observer = observer
        self.clusters: dict[str, tuple[LocalCluster, bool]] = {}  # key -> (cluster, owned)

    def get(self, s: Scenario) -> tuple[LocalCluster, bool]:
        info = registry.BROKERS[s.broker]
        key = f"{info.local_cluster}:{s.cluster.nodes}"
        if key in self.clusters:
            cluster, owned = self.clusters[key]
            if all(cluster.alive()):
                return cluster, not owned
            cluster.stop()  # a node died in an earlier run and was not restarted: start afresh
            del self.clusters[key]
        running = local.find_running(s.broker)
        if running is not None and running.nodes == s.cluster.nodes:
            self.observer.phase(f"using the local {s.broker} cluster that is already up")
            self.clusters[key] = (running, False)
            return running, True
        workdir = local.state_dir() / "runs" / f"cluster-{info.local_cluster}-{time.time_ns()}"
        cluster = local.cluster_class(s.broker)(workdir, s.cluster.nodes)
        self.observer.phase(f"starting a local {s.cluster.nodes}-node {s.broker} cluster")
        cluster.start(self.observer.phase)
        self.clusters[key] = (cluster, True)
        return cluster, False

    def close(self) -> None:
        for cluster, owned in self.clusters.values():
            if owned:
                self.observer.phase(f"stopping the local {cluster.broker} cluster")
                cluster.stop()
        self.clusters = {}


def execute(
    scenarios: list[Scenario], results_dir: Path, observer: Observer | None = None
) -> list[RunResult]:
    observer = observer or Observer()
    for s in scenarios:
        if s.cluster.target != "local":
            raise ScenarioError(
                s.source,
                "cluster.target",
                f"mqlab run drives target {s.cluster.target!r} only through a fleet",
                'use target = "local" here; AWS labs: mqlab infra up',
            )
    pool = ClusterPool(observer)
    results = []
    try:
        for s in scenarios:
            results.append(run_one(s, results_dir, pool, observer))
            if results[-1].end_reason == "interrupted":
                break
    finally:
        pool.close()
    return results


def _new_run_dir(results_dir: Path, s: Scenario) -> Path:
    started = dt.datetime.now(dt.UTC)
    base = layout.run_id(started, s.name, s.label)
    d = results_dir / base
    n = 2
    while d.exists():
        d = results_dir / f"{base}-{n}"
        n += 1
    d.mkdir(parents=True)
    return d


def _write_manifest(run_dir: Path, manifest: dict[str, Any]) -> None:
    write_json(run_dir / layout.MANIFEST, manifest)


def run_one(s: Scenario, results_dir: Path, pool: ClusterPool, observer: Observer) -> RunResult:
    run_dir = _new_run_dir(results_dir, s)
    run_id = run_dir.name
    (run_dir / "scenario.toml").write_text(scenario_mod.to_toml(s))
    driver_cls = registry.driver_class(s.broker)
    manifest = base_manifest(run_id, s, driver_cls.client_libraries)
    _write_manifest(run_dir, manifest)
    control = local.state_dir() / "runs" / run_id / "control"
    control.mkdir(parents=True, exist_ok=True)
    workers: list[_Worker] = []
    driver: Driver | None = None
    end_reason = "completed"
    try:
        observer.phase(f"run {run_id}")
        cluster, reused = pool.get(s)
        manifest["cluster"]["reused"] = reused
        manifest["broker"]["server_versions"] = cluster.server_versions()
        queue = (
            "mqlab_" + run_id.split("_")[0].replace("-", "").lower() + f"_{time.time_ns() % 10**6}"
        )
        driver = driver_cls(s.profile.settings, cluster.endpoints(), queue)
        observer.phase("setup: creating the queue")
        driver.setup()
        if not manifest["broker"]["server_versions"]:
            manifest["broker"]["server_versions"] = driver.server_versions()
        _write_manifest(run_dir, manifest)
        end_reason = _measure(s, run_dir, control, cluster, driver, workers, manifest, observer)
    except KeyboardInterrupt:
        end_reason = "interrupted"
    except MqlabError as e:
        end_reason = f"failed: {e}"
        LOG.error("%s", e)
    finally:
        try:
            _stop_workers(workers, control)
        except KeyboardInterrupt:
            _stop_workers(workers, control, grace_s=2)
            end_reason = "interrupted"
        if driver is not None:
            _check_undrained(driver, run_dir)
            with contextlib.suppress(Exception):
                observer.phase("teardown: removing the queue")
                driver.teardown()
            with contextlib.suppress(Exception):
                driver.close()
        manifest["ended_at"] = dt.datetime.now(dt.UTC).isoformat(timespec="milliseconds")
        if manifest["measure"]["start_ms"] is not None:
            manifest["measure"]["end_ms"] = int(time.time() * 1000)
        else:  # nothing measured: an empty, still valid window
            now = int(time.time() * 1000)
            manifest["measure"].update(start_ms=now, warmup_end_ms=now, end_ms=now)
        manifest["workers"] = [_worker_status(w) for w in workers]
        ok = end_reason == "completed" and all(x["status"] == "ok" for x in manifest["workers"])
        manifest["status"] = "complete" if ok else "partial"
        manifest["end_reason"] = end_reason
        _write_manifest(run_dir, manifest)
        shutil.rmtree(control.parent, ignore_errors=True)
        for w in workers:
            log = w.dir / "stderr.log"
            if log.is_file() and log.stat().st_size == 0:
                log.unlink()
            with contextlib.suppress(FileNotFoundError):
                (w.dir / "ready").unlink()
            with contextlib.suppress(FileNotFoundError):
                (w.dir / "progress.json").unlink()
        summary = summarize_run(run_dir, results_dir=results_dir)
    result = RunResult(s, run_dir, manifest["status"], end_reason, summary)
    observer.finished(result)
    return result


def _worker_status(w: _Worker) -> dict[str, Any]:
    info: dict[str, Any] = {
        "id": w.spec.worker_id,
        "role": w.spec.role,
        "node": w.spec.node,
        "exit_code": w.proc.returncode,
    }
    try:
        info["status"] = read_json(w.dir / layout.WORKER)["status"]
    except MqlabError:
        info["status"] = "lost"  # died before writing its record
    return info


def _spawn(spec: WorkerSpec, run_dir: Path) -> _Worker:
    d = Path(spec.out_dir)
    d.mkdir(parents=True, exist_ok=True)
    spec_path = Path(spec.control_dir) / f"{spec.worker_id}.json"
    spec.write(spec_path)
    with open(d / "stderr.log", "wb") as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", "mqlab.workload.worker", str(spec_path)],
            stdin=subprocess.DEVNULL,
            stdout=err,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    return _Worker(spec, proc, d)


def _specs(
    s: Scenario,
    run_id: str,
    run_dir: Path,
    control: Path,
    endpoints: dict[str, Any],
    queue: str,
    role: str,
) -> list[WorkerSpec]:
    c = s.clients
    nodes, threads = (
        (c.sender_nodes, c.sender_threads)
        if role == "sender"
        else (c.receiver_nodes, c.receiver_threads)
    )
    return [
        WorkerSpec(
            run_id=run_id,
            worker_id=f"{role}-{i:02d}",
            role=role,
            node=i,
            threads=threads,
            broker=s.broker,
            settings=typed.to_table(s.profile.settings),
            endpoints=endpoints,
            queue=queue,
            workload=typed.to_table(s.workload),
            out_dir=str(run_dir / "workers" / f"{role}-{i:02d}"),
            control_dir=str(control),
            seed=(1 if role == "sender" else 2) * 1000 + i,
        )
        for i in range(nodes)
    ]


def _wait_ready(workers: list[_Worker]) -> None:
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline:
        if all((w.dir / "ready").exists() for w in workers):
            return
        for w in workers:
            if w.done and not (w.dir / "ready").exists():
                raise ClusterError(
                    f"worker {w.spec.worker_id} exited ({w.proc.returncode}) before "
                    f"it was ready; see {w.dir / 'stderr.log'}"
                )
        time.sleep(0.05)
    raise ClusterError(f"workers not ready after {READY_TIMEOUT_S:.0f} s")


def _totals(workers: list[_Worker]) -> dict[str, int]:
    out: dict[str, int] = {}
    for w in workers:
        try:
            data = json.loads((w.dir / "progress.json").read_text())
        except (OSError, ValueError):
            continue
        for k, v in data.get("totals", {}).items():
            out[k] = out.get(k, 0) + int(v)
    return out


def _control(control: Path, name: str, text: str = "1\n") -> None:
    tmp = control / f".{name}.tmp"
    tmp.write_text(text)
    tmp.replace(control / name)


def _drain_timeout_s(s: Scenario, driver: Driver) -> float:
    if s.workload.drain_timeout_s > 0:
        return s.workload.drain_timeout_s
    return 2 * driver.redelivery_timeout_s + 10.0


def _drained(driver: Driver, workers: list[_Worker]) -> bool:
    """The broker holds nothing for the queue, nothing is in flight."""
    try:
        rem = driver.remaining()
    except Exception as e:  # noqa: BLE001 - a failed check is not "drained"; try again
        LOG.debug("remaining(): %s", e)
        return False
    if rem.count:
        return False
    if rem.in_flight is None:  # the broker does not count unacked deliveries: ask receivers
        t = _totals([w for w in workers if w.spec.role == "receiver"])
        return t.get("received", 0) == t.get("acked", 0)
    return True


def _check_undrained(driver: Driver, run_dir: Path) -> None:
    """Ask the broker what it still holds for the queue; write ``undrained.json``."""
    now = int(time.time() * 1000)
    try:
        rem = driver.remaining(identify=driver.identifies_remaining)
    except Exception as e:  # noqa: BLE001 - unknown, and said so
        LOG.warning("could not ask the broker what is left in the queue: %s", e)
        write_undrained(
            run_dir / layout.UNDRAINED,
            UndrainedRecord(now, None, error=f"{type(e).__name__}: {e}"[:500]),
        )
        return
    rec = UndrainedRecord(now, rem.count, rem.in_flight, identified=rem.payloads is not None)
    if rem.payloads is not None:
        good = [m[: envelope.HEADER_BYTES] for m in rem.payloads if len(m) >= envelope.HEADER_BYTES]
        rec.foreign = len(rem.payloads) - len(good)
        decoded, ok = envelope.split_foreign(b"".join(good))
        rec.foreign += int(decoded.size - ok.sum())
        decoded = decoded[ok]
        for sid in set(decoded["sender"].tolist()):
            seqs = decoded["seq"][decoded["sender"] == sid]
            rec.senders[int(sid)] = BitMap64(seqs.astype("uint64").tolist())
    write_undrained(run_dir / layout.UNDRAINED, rec)


def _measure(
    s: Scenario,
    run_dir: Path,
    control: Path,
    cluster: LocalCluster,
    driver: Driver,
    workers: list[_Worker],
    manifest: dict[str, Any],
    observer: Observer,
) -> str:
    endpoints = cluster.endpoints().to_json()
    receivers = [
        _spawn(sp, run_dir)
        for sp in _specs(s, run_dir.name, run_dir, control, endpoints, driver.queue, "receiver")
    ]
    workers.extend(receivers)
    observer.phase(f"receivers: {len(receivers)} node(s) x {s.clients.receiver_threads} threads")
    _wait_ready(receivers)
    senders = [
        _spawn(sp, run_dir)
        for sp in _specs(s, run_dir.name, run_dir, control, endpoints, driver.queue, "sender")
    ]
    workers.extend(senders)
    observer.phase(f"senders: {len(senders)} node(s) x {s.clients.sender_threads} threads")
    _wait_ready(senders)  # connected, about to send
    start_ms = int(time.time() * 1000)
    _control(control, "go", f"{start_ms}\n")
    manifest["measure"]["start_ms"] = start_ms
    manifest["measure"]["warmup_end_ms"] = start_ms + int(s.workload.warmup_s * 1000)
    _write_manifest(run_dir, manifest)
    w = s.workload
    expected = (
        w.messages_per_thread * s.clients.sender_threads * s.clients.sender_nodes
        if w.messages_per_thread
        else None
    )
    faults = sorted(s.faults, key=lambda f: f.at_s)
    pending_restarts: list[tuple[float, int]] = []
    t0 = time.monotonic()
    hard_deadline = t0 + w.max_run_s + 60
    drain_deadline: float | None = None
    drain_started = 0.0
    next_check = 0.0
    empty_checks = 0
    stop_sent = False
    while True:
        now = time.monotonic()
        elapsed = now - t0
        while faults and elapsed >= faults[0].at_s:
            f = faults.pop(0)
            _apply_fault(f, cluster, manifest, observer, pending_restarts, t0)
        for at, node in list(pending_restarts):
            if elapsed >= at:
                pending_restarts.remove((at, node))
                observer.phase(f"fault: restarting node {node}")
                cluster.restart_node(node)
                manifest["faults"].append(
                    {"action": "restart_node", "node": node, "at_ms": int(time.time() * 1000)}
                )
        failed = [x for x in workers if x.done and x.proc.returncode not in (0,)]
        if failed:
            return f"worker_failed: {failed[0].spec.worker_id} (exit {failed[0].proc.returncode})"
        if drain_deadline is None and all(x.done for x in senders):
            drain_started = now
            drain_deadline = now + _drain_timeout_s(s, driver)
            observer.phase(
                "drain: receivers stop once the broker holds nothing "
                f"(at most {drain_deadline - now:.0f} s)"
            )
        if drain_deadline is not None and not stop_sent and now >= next_check:
            next_check = now + DRAIN_CHECK_S
            empty_checks = empty_checks + 1 if _drained(driver, workers) else 0
            ended_by = "broker empty" if empty_checks >= 2 else None
            if ended_by is None and now >= drain_deadline:
                ended_by = "drain deadline"
            if ended_by is not None:
                manifest["drain"] = {"ended_by": ended_by, "seconds": round(now - drain_started, 3)}
                _control(control, "receivers-stop")
                stop_sent = True
        if drain_deadline is not None and all(x.done for x in receivers):
            break
        if time.monotonic() > hard_deadline:
            return "max_run_s exceeded"
        observer.progress(elapsed, _totals(workers), expected)
        time.sleep(0.1)
    for _at, node in pending_restarts:
        cluster.restart_node(node)
    observer.progress(time.monotonic() - t0, _totals(workers), expected)
    return "completed"


def _apply_fault(
    f: Any,
    cluster: LocalCluster,
    manifest: dict[str, Any],
    observer: Observer,
    pending: list[tuple[float, int]],
    t0: float,
) -> None:
    at_ms = int(time.time() * 1000)
    if f.action == "kill_node":
        observer.phase(f"fault: killing node {f.node}")
        cluster.kill_node(f.node)
        if f.restart_after_s is not None:
            pending.append((f.at_s + f.restart_after_s, f.node))
    else:
        cluster.restart_node(f.node)
    manifest["faults"].append({**dataclasses.asdict(f), "at_ms": at_ms})


def _stop_workers(workers: list[_Worker], control: Path, grace_s: float = STOP_GRACE_S) -> None:
    """Ask running workers to stop (control file, then SIGTERM), SIGKILL after ``grace_s``."""
    running = [w for w in workers if not w.done]
    if not running:
        return
    with contextlib.suppress(OSError):
        (control / "stop").write_text("1\n")
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline and any(not w.done for w in running):
        time.sleep(0.1)
    for w in running:
        if not w.done:
            with contextlib.suppress(ProcessLookupError):
                w.proc.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and any(not w.done for w in running):
        time.sleep(0.1)
    for w in running:
        if not w.done:
            with contextlib.suppress(ProcessLookupError):
                w.proc.kill()
            w.proc.wait()


def execute_files(
    paths: list[Path], results_dir: Path, observer: Observer | None = None
) -> list[RunResult]:
    scenarios = [s for p in paths for s in scenario_mod.load_scenario(p)]
    with sigterm_as_interrupt():
        return execute(scenarios, results_dir, observer)
