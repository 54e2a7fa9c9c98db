"""The phases of one run: setup → receivers → senders → measure → drain → teardown → archive.

``execute(scenarios)`` runs every sweep point in order, reusing one cluster per
broker and placement for the whole sweep (or the one `mqlab cluster up` left running).

Where things run is one seam (``mqlab.labs.placement``): all on this machine
(``target = "local"``), or broker nodes and workers on hosts of their own reached over
SSH (``netns``, ``ssh``, ``aws``). The phases are the same either way; every worker is
a process attached to the coordinator by stdin/stdout (``mqlab.hosts``).

- On hosts of their own, each client host's clock offset to the coordinator is
  measured before and after the run (``mqlab.hosts.clocks``); receivers correct
  end-to-end latencies by it and the manifest records offsets and the error bound.
- Receivers start first; senders connect, and once every worker is ready all
  senders start on one command (``go``): the measured run starts there, so
  imports and connects never eat the warm-up.
- After the senders stop, receivers drain until the broker holds nothing for the
  queue (every queue of the run, with ``workload.queues`` > 1; asked every half second,
  twice in a row), or until the drain deadline
  (``drain_timeout_s``; by default twice the profile's redelivery timeout + 10 s).
- Then the broker is asked once more what it still holds (``undrained.json``), and
  the run is summarized in process (``summary.json``, Parquet, the catalog).

Each worker's folder is fetched back from its host. Ctrl-C, a lost SSH connection, a
failed host or worker still end every worker and leave a valid archive, marked partial.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import json
import logging
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any, TypeAlias

from pyroaring import BitMap64

from mqlab import cpu, envelope, typed
from mqlab.analysis.job import summarize_run
from mqlab.analysis.tables import FAILED
from mqlab.archive import layout
from mqlab.archive.formats import read_json, write_json
from mqlab.archive.manifest import base_manifest
from mqlab.archive.records import UndrainedRecord, write_undrained
from mqlab.brokers import local, registry
from mqlab.brokers.base import Driver, Remaining
from mqlab.brokers.cluster import LocalCluster
from mqlab.errors import ClusterError, FleetError, MqlabError
from mqlab.faults import link as linkfaults
from mqlab.faults import partitions, powerloss
from mqlab.hosts import clocks
from mqlab.hosts.base import Attached, Host
from mqlab.labs.placement import Placement, for_scenario
from mqlab.scenario import load as scenario_load
from mqlab.scenario import model as scenario_model
from mqlab.scenario.model import Scenario
from mqlab.signals import sigterm_as_interrupt
from mqlab.workload.spec import WorkerSpec, processes, queue_names

LOG = logging.getLogger(__name__)
# a fault whose end heals something: a partition, a netem, a power cut
Healable: TypeAlias = "partitions.Cut | linkfaults.LinkFault | PowerCut"
UNDRAINED_RETRY_S = 90.0  # how long the end-of-run count waits for a broker to answer
LEADER_WAIT_S = 30.0  # a fault aimed at the leader waits this long for one (an election)
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
    """One worker process on a host, attached by stdin/stdout."""

    spec: WorkerSpec
    host: Host
    proc: Attached
    remote_dir: PurePosixPath  # its folder on the host
    dir: Path  # its folder in the archive
    ready: bool = False
    started: dict[str, Any] = field(default_factory=dict)
    totals: dict[str, int] = field(default_factory=dict)
    exit_code: int | None = None
    fetched: str | None = None  # why the folder could not be fetched, if so
    send_path: str | None = None  # senders: how they send (WorkerRecord.send_path)

    def pump(self) -> None:
        """Take the events it sent since the last call."""
        for line in self.proc.take():
            try:
                ev = json.loads(line)
            except ValueError:
                LOG.debug("%s: %s", self.spec.worker_id, line)
                continue
            kind = ev.get("event")
            if kind == "ready":
                self.ready = True
                self.send_path = ev.get("send_path")
            elif kind in ("progress", "done"):
                self.totals = {k: int(v) for k, v in ev.get("totals", {}).items()}
            elif kind == "started":
                self.started = ev

    @property
    def returncode(self) -> int | None:
        if self.exit_code is None:
            self.exit_code = self.proc.poll()
        return self.exit_code

    @property
    def done(self) -> bool:
        return self.returncode is not None


class ClusterPool:
    """Local clusters for a sequence of runs: reuse a running one, else start and later stop."""

    def __init__(self, observer: Observer):
        self.observer = observer
        self.clusters: dict[str, tuple[LocalCluster, bool]] = {}  # key -> (cluster, owned)

    def get(self, s: Scenario, placement: Placement) -> tuple[LocalCluster, bool]:
        info = registry.BROKERS[s.broker]
        kind = s.broker if placement.brokers_from_image else info.local_cluster
        key = f"{kind}:{s.cluster.nodes}:{placement.kind}:{placement.name}"
        if key in self.clusters:
            cluster, owned = self.clusters[key]
            if all(cluster.alive()):
                return cluster, not owned
            cluster.stop()  # a node died in an earlier run and was not restarted: start afresh
            del self.clusters[key]
        running = local.find_running(s.broker) if not placement.remote else None
        if running is not None and running.nodes == s.cluster.nodes:
            self.observer.phase(f"using the local {s.broker} cluster that is already up")
            self.clusters[key] = (running, False)
            return running, True
        workdir = local.state_dir() / "runs" / f"cluster-{kind or s.broker}-{time.time_ns()}"
        # a lab whose images run the brokers (AWS): the class that attaches to them
        cls = (
            local.attach_class(s.broker)
            if placement.brokers_from_image
            else local.cluster_class(s.broker)
        )
        cluster = cls(workdir, s.cluster.nodes, placement.brokers if placement.remote else None)
        cluster.trusted_addresses = placement.client_addresses()
        cluster.reach = placement.reach
        cluster.attached = placement.brokers_from_image
        where = "local" if not placement.remote else f"{placement.kind} lab {placement.name}'s"
        verb = "checking the" if cluster.attached else "starting a"
        self.observer.phase(
            f"{verb} {s.cluster.nodes}-node {s.broker} cluster on the {where} hosts"
        )
        cluster.start(self.observer.phase)
        self.clusters[key] = (cluster, True)
        return cluster, False

    def close(self) -> None:
        for cluster, owned in self.clusters.values():
            if owned:
                self.observer.phase(f"stopping the {cluster.broker} cluster")
                with contextlib.suppress(MqlabError):
                    cluster.stop()
        self.clusters = {}


def execute(
    scenarios: list[Scenario], results_dir: Path, observer: Observer | None = None
) -> list[RunResult]:
    observer = observer or Observer()
    pool = ClusterPool(observer)
    placements: dict[tuple[str, ...], Placement] = {}
    results = []
    try:
        for s in scenarios:
            key = _placement_key(s)
            if key not in placements:
                placements[key] = for_scenario(s, observer.phase)
            results.append(run_one(s, results_dir, pool, observer, placements[key]))
            if results[-1].end_reason == "interrupted":
                break
    finally:
        try:
            pool.close()
        finally:
            for p in placements.values():
                p.close(observer.phase)
    return results


def _placement_key(s: Scenario) -> tuple[str, ...]:
    c = s.cluster
    shape = (str(c.nodes), str(s.clients.sender_nodes), str(s.clients.receiver_nodes))
    if c.target == "local":
        return ("local",)
    if c.target == "netns":
        from mqlab.labs.placement import lab_name

        return ("netns", lab_name(s), repr(c.netns), *shape)
    return (c.target, c.inventory, str(s.source))


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


def run_one(
    s: Scenario,
    results_dir: Path,
    pool: ClusterPool,
    observer: Observer,
    placement: Placement | None = None,
) -> RunResult:
    placement = placement or for_scenario(s, observer.phase)
    run_dir = _new_run_dir(results_dir, s)
    run_id = run_dir.name
    (run_dir / "scenario.toml").write_text(scenario_load.to_toml(s))
    driver_cls = registry.driver_class(s.broker)
    manifest = base_manifest(run_id, s, driver_cls.client_libraries)
    manifest["lab"] = placement.lab_manifest()
    _write_manifest(run_dir, manifest)
    workers: list[_Worker] = []
    drivers: list[Driver] = []  # one per queue (workload.queues); drivers[0]: queue 0
    before: dict[str, Any] = {}
    end_reason = "completed"
    try:
        observer.phase(f"run {run_id}")
        cluster, reused = pool.get(s, placement)
        manifest["cluster"]["reused"] = reused
        manifest["cluster"]["nodes_at"] = [
            {
                "index": n.index,
                "host": cluster.hosts[n.index].name if n.index < len(cluster.hosts) else None,
                "address": n.host,
                "port": n.port,
            }
            for n in cluster.endpoints().nodes
        ]
        manifest["cluster"]["brokers_started_by"] = "image" if cluster.attached else "mqlab"
        manifest["cluster"]["coordinator_reach"] = "ssh tunnel" if placement.tunnels else "direct"
        # a local stand-in serves instead of the real system: its runs are marked
        manifest["broker"]["stand_in"] = None if cluster.attached else cluster.stand_in
        manifest["broker"]["server_versions"] = (
            cluster.attached_versions() if cluster.attached else cluster.server_versions()
        )
        base = (
            "mqlab_" + run_id.split("_")[0].replace("-", "").lower() + f"_{time.time_ns() % 10**6}"
        )
        names = queue_names(base, s.workload.queues)
        manifest["queue_names"] = names
        # the coordinator's own clients (setup, drain checks, teardown), one per queue:
        # through SSH tunnels where the lab's addresses are private; workers get the
        # addresses
        reach = placement.reachable(cluster.endpoints(), cluster.follows_advertised)
        observer.phase(
            "setup: creating the queue"
            if len(names) == 1
            else f"setup: creating {len(names)} queues ({names[0]} .. {names[-1]})"
        )
        for name in names:
            drivers.append(driver_cls(s.profile.settings, reach, name))
            drivers[-1].setup()
        if not manifest["broker"]["server_versions"]:
            manifest["broker"]["server_versions"] = drivers[0].server_versions()
        placement.prepare_workers(observer.phase)
        manifest["lab"] = placement.lab_manifest()
        before = _measure_clocks(placement, observer, "before")
        _write_manifest(run_dir, manifest)
        end_reason = _measure(
            s, run_dir, placement, cluster, drivers, workers, manifest, observer, before
        )
    except KeyboardInterrupt:
        end_reason = "interrupted"
    except MqlabError as e:
        end_reason = f"failed: {e}"
        LOG.error("%s", e)
    except Exception as e:  # a bug in mqlab: the archive says the run failed, the traceback shows
        end_reason = f"failed: internal error {type(e).__name__}: {e}"
        raise
    finally:
        try:
            _stop_workers(workers)
        except KeyboardInterrupt:
            _stop_workers(workers, grace_s=2)
            end_reason = "interrupted"
        _fetch_workers(workers, placement, run_dir, observer)
        if drivers:
            _check_undrained(drivers, run_dir)
            observer.phase(
                "teardown: removing the queue"
                if len(drivers) == 1
                else f"teardown: removing {len(drivers)} queues"
            )
            for driver in drivers:
                with contextlib.suppress(Exception):
                    driver.teardown()
                with contextlib.suppress(Exception):
                    driver.close()
        after = _measure_clocks(placement, observer, "after") if before else {}
        manifest["clock"] = _clock_section(s, placement, workers, before, after)
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
        for w in workers:
            log = w.dir / "stderr.log"
            if log.is_file() and log.stat().st_size == 0:
                log.unlink()
        for spec_file in (run_dir / "workers").glob("*.spec.json"):
            spec_file.unlink()
        summary = summarize_run(run_dir, results_dir=results_dir)
    # a run that broke a requirement of its scenario (workload.order = "strict") is
    # archived like any other; its summary's status says it failed
    status = summary["status"] if summary.get("status") == FAILED else manifest["status"]
    result = RunResult(s, run_dir, status, end_reason, summary)
    observer.finished(result)
    return result


# -- clocks ------------------------------------------------------------------------------
def _measure_clocks(placement: Placement, observer: Observer, when: str) -> dict[str, Any]:
    """Each client host's clock offset to the coordinator (empty for a local run)."""
    if not placement.remote:
        return {}
    observer.phase(f"clocks: measuring each client host's offset ({when} the run)")
    out: dict[str, Any] = {}
    for h in placement.client_hosts():
        try:
            probe = h.attach(
                [placement.python(h), "-m", "mqlab.hosts.clocks"], env=placement.env(h)
            )
        except MqlabError as e:
            LOG.warning("%s: clock probe failed: %s", h.name, e)
            continue
        try:
            exchange = clocks.exchange_over(_writer(probe), _reader(probe))
            out[h.name] = clocks.estimate(exchange)
        except MqlabError as e:
            LOG.warning("%s: clock probe failed: %s", h.name, e)
        finally:
            probe.send("bye")
            probe.close_stdin()
            deadline = time.monotonic() + 5
            while probe.poll() is None and time.monotonic() < deadline:
                time.sleep(0.02)
            if probe.poll() is None:
                probe.kill()
    return out


def _writer(probe: Attached) -> Callable[[bytes], None]:
    def write(data: bytes) -> None:
        if not probe.send(data.decode().rstrip("\n")):
            raise FleetError("the clock probe's connection closed")

    return write


def _reader(probe: Attached) -> Callable[[], bytes]:
    def readline() -> bytes:
        try:
            return (probe.readline(30) + "\n").encode()
        except FleetError:
            return b""  # EOF or silence: exchange_over reports it

    return readline


def _clock_section(
    s: Scenario,
    placement: Placement,
    workers: list[_Worker],
    before: dict[str, Any],
    after: dict[str, Any],
) -> dict[str, Any]:
    if not placement.remote:
        return clocks.local_section(budget_ms=s.cluster.clock_budget_ms)
    senders = {w.spec.worker_id: w.host.name for w in workers if w.spec.role == "sender"}
    receivers = {w.spec.worker_id: w.host.name for w in workers if w.spec.role == "receiver"}
    if not senders:
        senders = {
            f"sender-{i:02d}": placement.sender_host(i).name for i in range(s.clients.sender_nodes)
        }
        receivers = {
            f"receiver-{i:02d}": placement.receiver_host(i).name
            for i in range(s.clients.receiver_nodes)
        }
    return clocks.clock_section(
        before, after or None, senders, receivers, s.cluster.clock_budget_ms
    )


def _corrections(
    s: Scenario,
    placement: Placement,
    before: dict[str, Any],
    receiver: Host,
    sender_processes: Sequence[int],
) -> dict[str, int]:
    if not before:
        return {}
    offsets = {name: est.offset_ms for name, est in before.items()}
    threads = s.clients.sender_threads
    sender_hosts = {
        p.first_sender_id(threads) + t: placement.sender_host(p.node).name
        for p in processes(sender_processes)
        for t in range(threads)
    }
    if receiver.name not in offsets or any(h not in offsets for h in sender_hosts.values()):
        return {}
    return clocks.corrections_us(offsets, sender_hosts, receiver.name)


# -- workers -----------------------------------------------------------------------------
def _worker_status(w: _Worker) -> dict[str, Any]:
    info: dict[str, Any] = {
        "id": w.spec.worker_id,
        "role": w.spec.role,
        "node": w.spec.node,
        "process": w.spec.process,
        "host": w.host.name,
        "address": w.host.address,
        "exit_code": w.returncode,
    }
    if w.started.get("prefix") and not w.host.is_local:  # local runs name no local paths
        info["interpreter_prefix"] = w.started["prefix"]
    if w.fetched:
        info["fetch_error"] = w.fetched
    try:
        info["status"] = read_json(w.dir / layout.WORKER)["status"]
    except MqlabError:
        info["status"] = "lost"  # died (or its host was lost) before its record came back
    return info


def _spawn(
    spec: WorkerSpec, host: Host, placement: Placement, remote_dir: PurePosixPath, run_dir: Path
) -> _Worker:
    local_dir = run_dir / "workers" / spec.worker_id
    local_dir.mkdir(parents=True, exist_ok=True)
    spec_path = remote_dir.parent / f"{spec.worker_id}.spec.json"
    host.write_file(spec_path, json.dumps(dataclasses.asdict(spec), indent=1, sort_keys=True))
    host.mkdir(remote_dir)
    proc = host.attach(
        [placement.python(host), "-m", "mqlab.workload.worker", str(spec_path)],
        env=placement.env(host),
        cwd=remote_dir,
        stderr=remote_dir / "stderr.log",
    )
    return _Worker(spec, host, proc, remote_dir, local_dir)


def client_processes(s: Scenario, placement: Placement) -> dict[str, list[int]]:
    """Worker processes per client node, by role (``{"sender": [node 0's, ...],
    "receiver": [...]}``): the scenario's ``processes_per_node``, else the cores of each
    node's host (``os.cpu_count()`` on this machine, ``nproc`` on a remote host; each
    host asked once)."""
    c = s.clients
    cores: dict[str, int] = {}

    def of(host: Host) -> int:
        if c.processes_per_node is not None:
            return c.processes_per_node
        if host.name not in cores:
            cores[host.name] = _cores(host)
        return cores[host.name]

    return {
        "sender": [of(placement.sender_host(i)) for i in range(c.sender_nodes)],
        "receiver": [of(placement.receiver_host(i)) for i in range(c.receiver_nodes)],
    }


def _cores(host: Host) -> int:
    if host.is_local:
        return os.cpu_count() or 1
    out = host.run(["nproc"], timeout_s=30).out.strip()
    if not out.isdigit() or int(out) < 1:
        raise FleetError(f"{host.name}: nproc answered {out!r}, not a number of cores")
    return int(out)


def _shape(per_node: Sequence[int], threads: int) -> str:
    """``2 node(s) x 2 processes x 4 threads`` (what a role runs), for the progress line."""
    each = (
        f"{per_node[0]} process(es)"
        if len(set(per_node)) == 1
        else f"{sum(per_node)} processes in all"
    )
    return f"{len(per_node)} node(s) x {each} x {threads} threads"


def worker_specs(
    s: Scenario,
    run_id: str,
    run_dir: Path,
    placement: Placement,
    endpoints: dict[str, Any],
    queues: Sequence[str],
    role: str,
    before: dict[str, Any],
    shape: dict[str, list[int]],
) -> list[tuple[WorkerSpec, Host, PurePosixPath]]:
    """One spec per worker process of ``role``: ``shape[role][i]`` on node ``i``
    (:func:`client_processes`); ids, sender ids, receiver indexes (hence each thread's
    queue of ``queues``) and seeds as ``mqlab.workload.spec`` and ``layout.worker_id``
    say, so one process per node gives the specs runs always had."""
    c = s.clients
    threads = c.sender_threads if role == "sender" else c.receiver_threads
    per_node = shape[role]
    out = []
    for proc in processes(per_node):
        i = proc.node
        host = placement.sender_host(i) if role == "sender" else placement.receiver_host(i)
        wid = layout.worker_id(role, i, proc.process, per_node[i])
        remote_dir = placement.runs_dir(host, run_dir) / wid
        spec = WorkerSpec(
            run_id=run_id,
            worker_id=wid,
            role=role,
            node=i,
            threads=threads,
            broker=s.broker,
            settings=typed.to_table(s.profile.settings),
            endpoints=endpoints,
            queues=list(queues),
            workload=typed.to_table(s.workload),
            out_dir=str(remote_dir),
            seed=proc.seed(role),
            host=host.name,
            clock_corrections_us=_corrections(s, placement, before, host, shape["sender"])
            if role == "receiver"
            else {},
            process=proc.process,
            first_sender_id=proc.first_sender_id(threads) if role == "sender" else 0,
            first_receiver_index=proc.first_receiver_index(threads) if role == "receiver" else 0,
        )
        out.append((spec, host, remote_dir))
    return out


def _wait_ready(workers: list[_Worker]) -> None:
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline:
        for w in workers:
            w.pump()
        if all(w.ready for w in workers):
            return
        for w in workers:
            if w.done and not w.ready:
                raise ClusterError(
                    f"worker {w.spec.worker_id} on {w.host.name} exited ({w.returncode}) before "
                    f"it was ready; see {w.dir / 'stderr.log'}"
                )
        time.sleep(0.02)
    raise ClusterError(f"workers not ready after {READY_TIMEOUT_S:.0f} s")


def _totals(workers: list[_Worker]) -> dict[str, int]:
    out: dict[str, int] = {}
    for w in workers:
        w.pump()
        for k, v in w.totals.items():
            out[k] = out.get(k, 0) + v
    return out


def _command(workers: list[_Worker], text: str) -> None:
    for w in workers:
        if not w.done:
            w.proc.send(text)


def _fetch_workers(
    workers: list[_Worker], placement: Placement, run_dir: Path, observer: Observer
) -> None:
    """Bring every remote worker's folder into the archive; clean the hosts' run folders."""
    remote = [w for w in workers if not w.host.is_local]
    if remote:
        observer.phase(f"fetching {len(remote)} worker folder(s) from their hosts")
    for w in remote:
        try:
            w.host.fetch_dir(w.remote_dir, w.dir)
        except MqlabError as e:
            w.fetched = str(e)
            LOG.warning("%s: %s", w.spec.worker_id, e)
    hosts = {w.host.name: w for w in remote}
    failed = {w.host.name for w in remote if w.fetched}
    for name, w in hosts.items():
        if name not in failed:
            with contextlib.suppress(MqlabError):
                w.host.remove_tree(w.remote_dir.parent)


def _drain_timeout_s(s: Scenario, driver: Driver) -> float:
    if s.workload.drain_timeout_s > 0:
        return s.workload.drain_timeout_s
    return 2 * driver.redelivery_timeout_s + 10.0


def _drained(drivers: Sequence[Driver], receivers: list[_Worker]) -> bool:
    """The broker holds nothing for any of the run's queues, nothing is in flight."""
    counted_in_flight = True
    for driver in drivers:
        try:
            rem = driver.remaining()
        except Exception as e:  # noqa: BLE001 - a failed check is not "drained"; try again
            LOG.debug("remaining() of %s: %s", driver.queue, e)
            return False
        if rem.count:
            return False
        counted_in_flight = counted_in_flight and rem.in_flight is not None
    if not counted_in_flight:  # the broker does not count unacked deliveries: ask receivers
        t = _totals(receivers)
        return t.get("received", 0) == t.get("acked", 0)
    return True


def _remaining(driver: Driver, deadline: float) -> Remaining | Exception:
    """What the broker still holds for the driver's queue; a broker that does not answer
    (nodes still coming back from a fault) is asked again every 2 s until ``deadline``
    (monotonic s), then the error is the answer."""
    while True:
        try:
            return driver.remaining(identify=driver.identifies_remaining)
        except Exception as e:  # noqa: BLE001 - unknown, and said so
            if time.monotonic() < deadline:
                LOG.info("the broker does not answer yet (%s); asking again", e)
                time.sleep(2.0)
                continue
            LOG.warning("could not ask the broker what is left in %s: %s", driver.queue, e)
            return e


def _check_undrained(
    drivers: Sequence[Driver], run_dir: Path, retry_s: float = UNDRAINED_RETRY_S
) -> None:
    """Ask the broker what it still holds for each of the run's queues; write
    ``undrained.json``: the sum over the queues, and with more than one queue each
    queue's own figures (``queues``). A queue the broker did not answer for makes the
    sum unknown, and says why."""
    deadline = time.monotonic() + retry_s  # one wait for all the queues, not one each
    answers = [(d.queue, _remaining(d, deadline)) for d in drivers]
    now = int(time.time() * 1000)
    errors = {q: f"{type(a).__name__}: {a}"[:500] for q, a in answers if isinstance(a, Exception)}
    per_queue = {
        q: {"count": a.count, "in_flight": a.in_flight}
        if isinstance(a, Remaining)
        else {"count": None, "error": errors[q]}
        for q, a in answers
    }
    shown = per_queue if len(drivers) > 1 else {}
    if errors:
        q, error = next(iter(errors.items()))
        error = error if len(drivers) == 1 else f"{q}: {error}"[:500]
        write_undrained(
            run_dir / layout.UNDRAINED, UndrainedRecord(now, None, error=error, queues=shown)
        )
        return
    rems = [a for _q, a in answers if isinstance(a, Remaining)]
    in_flight = [r.in_flight for r in rems]
    rec = UndrainedRecord(
        now,
        sum(r.count for r in rems),
        None if None in in_flight else sum(x for x in in_flight if x is not None),
        identified=all(r.payloads is not None for r in rems),
        queues=shown,
    )
    if rec.identified:
        payloads = [m for r in rems for m in r.payloads or []]
        good = [m[: envelope.HEADER_BYTES] for m in payloads if len(m) >= envelope.HEADER_BYTES]
        rec.foreign = len(payloads) - len(good)
        decoded, ok = envelope.split_foreign(b"".join(good))
        rec.foreign += int(decoded.size - ok.sum())
        decoded = decoded[ok]
        for sid in set(decoded["sender"].tolist()):
            seqs = decoded["seq"][decoded["sender"] == sid]
            rec.senders[int(sid)] = BitMap64(seqs.astype("uint64").tolist())
    write_undrained(run_dir / layout.UNDRAINED, rec)


def _where(workers: list[_Worker]) -> str:
    return ", ".join(sorted({w.host.name for w in workers}))


def _measure(
    s: Scenario,
    run_dir: Path,
    placement: Placement,
    cluster: LocalCluster,
    drivers: Sequence[Driver],
    workers: list[_Worker],
    manifest: dict[str, Any],
    observer: Observer,
    before: dict[str, Any],
) -> str:
    """The measured run; a partition or netem still in place when it ends (completed,
    failed, interrupted, crashed) is healed before it returns."""
    cuts: dict[int, Healable] = {}  # partitions and netem in place, by their manifest entry
    broker_cpu = _broker_cpu(cluster, run_dir, manifest)
    try:
        return _measure_run(
            s, run_dir, placement, cluster, drivers, workers, manifest, observer, before, cuts
        )
    finally:
        if broker_cpu is not None:
            broker_cpu.stop()
        try:
            _heal_open(cuts, manifest, observer)
        except KeyboardInterrupt:  # a second Ctrl-C while healing: heal all the same
            _heal_open(cuts, manifest, observer)
            raise


def _broker_cpu(
    cluster: LocalCluster, run_dir: Path, manifest: dict[str, Any]
) -> cpu.GroupRecorder | None:
    """Record each broker node's CPU per second (``brokers/node-NN/cpu.csv``) where its
    processes are this machine's (started here by mqlab); the manifest's ``cpu`` section
    says whether it was recorded, and why not."""
    hosts = cluster.hosts[: cluster.nodes]
    if cluster.attached or not cluster.procs or not all(h.is_local for h in hosts):
        where = "started by the image" if cluster.attached else "on other hosts"
        manifest["cpu"] = {"brokers_recorded": False, "why": f"broker processes {where}"}
        return None
    manifest["cpu"] = {
        "brokers_recorded": True,
        "broker_cores": cpu.host_cores(),
        "broker_nodes": sorted(cluster.procs),
    }

    def groups() -> dict[int, int]:
        return {i: rec.pgid for i, rec in dict(cluster.procs).items()}

    return cpu.GroupRecorder(groups, run_dir / layout.BROKERS).start()


def _measure_run(
    s: Scenario,
    run_dir: Path,
    placement: Placement,
    cluster: LocalCluster,
    drivers: Sequence[Driver],
    workers: list[_Worker],
    manifest: dict[str, Any],
    observer: Observer,
    before: dict[str, Any],
    cuts: dict[int, Healable],
) -> str:
    # faults aimed at "the queue's leader" ask about queue 0's: with several queues each
    # may have a leader of its own, and the fault strikes queue 0's
    driver = drivers[0]
    queues = [d.queue for d in drivers]
    endpoints = cluster.endpoints().to_json()
    shape = client_processes(s, placement)
    manifest["clients"]["processes"] = shape

    def start(role: str) -> list[_Worker]:
        specs = worker_specs(
            s, run_dir.name, run_dir, placement, endpoints, queues, role, before, shape
        )
        started = []
        for spec, host, remote_dir in specs:
            started.append(_spawn(spec, host, placement, remote_dir, run_dir))
            workers.append(started[-1])
        return started

    receivers = start("receiver")
    observer.phase(
        f"receivers: {_shape(shape['receiver'], s.clients.receiver_threads)} on {_where(receivers)}"
    )
    _wait_ready(receivers)
    senders = start("sender")
    observer.phase(
        f"senders: {_shape(shape['sender'], s.clients.sender_threads)} on {_where(senders)}"
    )
    _wait_ready(senders)  # connected, about to send
    manifest["clients"]["send_paths"] = sorted({w.send_path for w in senders if w.send_path})
    start_ms = int(time.time() * 1000)
    warmup_end_ms = start_ms + int(s.workload.warmup_s * 1000)
    # every worker closes an interval there, so the measured period starts on a boundary:
    # receivers are told before the senders start (nothing is received before their
    # interval begins); senders close one at their start anyway, so they are told only
    # of a warm-up's end, after it (an interval closed at once would delay their start)
    _command(receivers, f"measure {warmup_end_ms}")
    _command(senders, f"go {start_ms}")
    if warmup_end_ms > start_ms:
        _command(senders, f"measure {warmup_end_ms}")
    manifest["measure"]["start_ms"] = start_ms
    manifest["measure"]["warmup_end_ms"] = warmup_end_ms
    _write_manifest(run_dir, manifest)
    w = s.workload
    expected = (
        w.messages_per_thread * s.clients.sender_threads * sum(shape["sender"])
        if w.messages_per_thread
        else None
    )
    faults = sorted(s.faults, key=lambda f: f.at_s)
    # (when, action, node) of the second halves of faults: restart_node, resume_node;
    # heal with the key of the partition in ``cuts`` for node
    pending_restarts: list[tuple[float, str, int]] = []
    fault_run = _FaultRun(cluster, driver, manifest, observer, pending_restarts, placement, cuts)
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
            _apply_fault(f, fault_run)
        for pending in list(pending_restarts):
            if elapsed >= pending[0]:
                pending_restarts.remove(pending)
                _end_fault(pending[1], pending[2], cluster, manifest, observer, cuts)
        totals = _totals(workers)
        failed = [x for x in workers if x.done and x.returncode != 0]
        if failed:
            x = failed[0]
            why = "lost connection to its host" if x.returncode == -1 else f"exit {x.returncode}"
            return f"worker_failed: {x.spec.worker_id} on {x.host.name} ({why})"
        if drain_deadline is None and all(x.done for x in senders):
            drain_started = now
            drain_deadline = now + _drain_timeout_s(s, driver)
            observer.phase(
                "drain: receivers stop once the broker holds nothing "
                f"(at most {drain_deadline - now:.0f} s)"
            )
        if drain_deadline is not None and not stop_sent and now >= next_check:
            next_check = now + DRAIN_CHECK_S
            empty_checks = empty_checks + 1 if _drained(drivers, receivers) else 0
            ended_by = "broker empty" if empty_checks >= 2 else None
            if ended_by is None and now >= drain_deadline:
                ended_by = "drain deadline"
            if ended_by is not None:
                manifest["drain"] = {"ended_by": ended_by, "seconds": round(now - drain_started, 3)}
                _command(receivers, "receivers-stop")
                stop_sent = True
        if drain_deadline is not None and all(x.done for x in receivers):
            break
        if time.monotonic() > hard_deadline:
            return "max_run_s exceeded"
        observer.progress(elapsed, totals, expected)
        time.sleep(0.1)
    for _at, action, node in pending_restarts:
        _end_fault(action, node, cluster, manifest, observer, cuts)
    observer.progress(time.monotonic() - t0, _totals(workers), expected)
    return "completed"


def _leader(cluster: LocalCluster, driver: Driver, what: str, wait_s: float = LEADER_WAIT_S) -> int:
    """The node leading the driver's queue now, for a fault aimed at it. A cluster between
    leaders (an election after an earlier fault) is asked again each second for up to
    ``wait_s``; the fault strikes once there is one."""
    deadline = time.monotonic() + wait_s
    while True:
        try:
            return cluster.leader(driver)
        except MqlabError as e:
            if time.monotonic() >= deadline:
                raise ClusterError(
                    f"{what}: cannot tell the leader after {wait_s:g} s ({e})"
                ) from None
            LOG.info("%s: no leader yet (%s); asking again", what, e)
            time.sleep(1.0)


@dataclass
class _FaultRun:
    """What applying a fault touches: the cluster and driver, the manifest's fault log,
    the second halves still to come (``pending``) and what is in place to heal (``cuts``)."""

    cluster: LocalCluster
    driver: Driver
    manifest: dict[str, Any]
    observer: Observer
    pending: list[tuple[float, str, int]]
    placement: Placement
    cuts: dict[int, Healable]


def _apply_fault(f: Any, ctx: _FaultRun) -> None:
    cluster, driver, manifest, observer = ctx.cluster, ctx.driver, ctx.manifest, ctx.observer
    pending = ctx.pending
    node = f.node
    if f.action == "partition":
        _partition(f, ctx)
        return
    if f.action == "netem":
        _netem(f, ctx)
        return
    if f.action in scenario_model.POWER_LOSS:
        _power_loss(f, ctx)
        return
    if f.action == "kill_leader":
        node = _leader(cluster, driver, "kill_leader")
    at_ms = int(time.time() * 1000)  # once the leader is known: when the fault strikes
    if f.action in ("kill_node", "kill_leader"):
        leader = " (the leader)" if f.action == "kill_leader" else ""
        observer.phase(f"fault: killing node {node}{leader}")
        cluster.kill_node(node)
        if f.restart_after_s is not None:
            pending.append((f.at_s + f.restart_after_s, "restart_node", node))
    elif f.action == "pause_node":
        observer.phase(f"fault: pausing node {f.node} for {f.duration_s:g} s")
        cluster.pause_node(f.node)
        pending.append((f.at_s + f.duration_s, "resume_node", f.node))
    elif f.action == "crash_all":
        observer.phase("fault: killing every node at once")
        cluster.crash_all()
        after = f.restart_after_s or 0.0
        pending.append((f.at_s + after, "restart_all", cluster.nodes))
    else:
        cluster.restart_node(f.node)
    entry = {**dataclasses.asdict(f), "node": node, "at_ms": at_ms}
    if f.action == "crash_all":
        entry["nodes"] = cluster.nodes
    manifest["faults"].append(entry)


def _on_own_hosts(placement: Placement, what: str) -> None:
    """A fault between hosts needs hosts with network stacks of their own (the scenario
    check refuses it earlier; this guards the run itself)."""
    if not placement.remote:
        raise FleetError(
            f"{what} needs hosts of their own (every node is on this machine); "
            'run on a lab: cluster.target = "netns"'
        )


def _partition(f: Any, ctx: _FaultRun) -> None:
    """Cut hosts apart with blackhole routes (``mqlab.faults.partitions``); heal later."""
    cluster, driver, manifest, observer = ctx.cluster, ctx.driver, ctx.manifest, ctx.observer
    pending, placement, cuts = ctx.pending, ctx.placement, ctx.cuts
    node = f.node
    if f.partition in scenario_model.LEADER_PARTITIONS:
        node = _leader(cluster, driver, f"partition {f.partition}")
    at_ms = int(time.time() * 1000)
    _on_own_hosts(placement, "a partition")
    clients = placement.client_hosts()
    routes = partitions.plan(f.partition, cluster.hosts, clients, node)
    hosts = {h.name: h for h in [*cluster.hosts, *clients]}
    cut = partitions.Cut(f.partition, node, routes, hosts)
    key = len(manifest["faults"])
    entry = {
        **dataclasses.asdict(f),
        "node": node,
        "at_ms": at_ms,
        "routes": [[r.host, r.address] for r in routes],
    }
    manifest["faults"].append(entry)
    cuts[key] = cut  # before a route is added: whatever happens next, it is healed
    observer.phase(f"fault: {cut.label} for {f.duration_s:g} s ({len(routes)} blackhole routes)")
    try:
        cut.apply()
    except MqlabError as e:
        entry["error"] = str(e)
        raise
    pending.append((f.at_s + f.duration_s, "heal", key))


def _netem(f: Any, ctx: _FaultRun) -> None:
    """Slow down node ``f.node``'s outbound link (``mqlab.faults.link``); heal later."""
    cluster, manifest, observer = ctx.cluster, ctx.manifest, ctx.observer
    pending, placement, cuts = ctx.pending, ctx.placement, ctx.cuts
    at_ms = int(time.time() * 1000)
    _on_own_hosts(placement, "netem")
    hosts = cluster.hosts
    peer = hosts[(f.node + 1) % len(hosts)].address if len(hosts) > 1 else hosts[0].address
    link = linkfaults.LinkFault(
        hosts[f.node], f.node, peer, f.delay_ms or 0.0, f.jitter_ms or 0.0, f.loss_pct or 0.0
    )
    key = len(manifest["faults"])
    entry = {**dataclasses.asdict(f), "at_ms": at_ms}
    manifest["faults"].append(entry)
    cuts[key] = link  # before the link is touched: whatever happens next, it is healed
    observer.phase(f"fault: {link.label} for {f.duration_s:g} s")
    began = time.monotonic()
    try:
        link.apply()
    except MqlabError as e:
        entry["error"] = str(e)
        raise
    finally:
        entry.update(via=link.via, dev=link.dev)
    entry["at_ms"] = int(time.time() * 1000)  # in effect from now, for duration_s
    pending.append((f.at_s + (time.monotonic() - began) + f.duration_s, "heal", key))


@dataclass
class PowerCut:
    """Broker hosts rebooted unsynced; healed once they are back and their nodes run."""

    cluster: LocalCluster
    nodes: list[int]
    hosts: list[Host]
    boot_ids: dict[str, str]

    def heal(self) -> None:
        powerloss.wait_back(self.hosts, self.boot_ids)
        if self.cluster.attached:  # the images' units start the brokers at boot
            deadline = time.monotonic() + powerloss.BACK_TIMEOUT_S
            while not all(self.cluster.alive()[i] for i in self.nodes):
                if time.monotonic() > deadline:
                    raise ClusterError("power_loss: the brokers did not start again after boot")
                time.sleep(2.0)
        else:
            self.cluster.restart_nodes(self.nodes)


def _power_loss(f: Any, ctx: _FaultRun) -> None:
    """Reboot broker hosts unsynced (``mqlab.faults.powerloss``); their nodes are started
    again once the hosts are back (at ``restart_after_s`` at the soonest)."""
    cluster, manifest, observer = ctx.cluster, ctx.manifest, ctx.observer
    pending, placement, cuts = ctx.pending, ctx.placement, ctx.cuts
    if not placement.remote or placement.kind in ("local", "netns"):
        raise FleetError(
            f"{f.action} reboots a host's kernel: here that kernel is this machine's; "
            'run on hosts of their own (target = "ssh" or "aws")'
        )
    nodes = list(range(cluster.nodes)) if f.action == "power_loss_all" else [f.node]
    hosts = list({cluster.hosts[i].name: cluster.hosts[i] for i in nodes}.values())
    where = "every broker host" if f.action == "power_loss_all" else f"node {f.node}'s host"
    observer.phase(f"fault: power loss on {where} (unsynced reboot)")
    at_ms = int(time.time() * 1000)
    boot_ids = powerloss.cut_power(hosts)
    entry = {**dataclasses.asdict(f), "node": nodes[0], "at_ms": at_ms, "boot_ids": boot_ids}
    if f.action == "power_loss_all":
        entry["nodes"] = cluster.nodes
    key = len(manifest["faults"])
    manifest["faults"].append(entry)
    cuts[key] = PowerCut(cluster, nodes, hosts, boot_ids)
    pending.append((f.at_s + (f.restart_after_s or 0.0), "heal", key))


def _heal_link(
    link: linkfaults.LinkFault, cuts: dict[int, Healable], key: int, manifest: dict[str, Any]
) -> None:
    entry: dict[str, Any] = {"action": "netem_end", "node": link.node}
    try:
        counts = link.heal()
    except MqlabError as e:
        entry["error"] = str(e)
        raise
    finally:
        del cuts[key]
        entry["at_ms"] = int(time.time() * 1000)
        manifest["faults"].append(entry)
    if counts:
        entry["impairer"] = counts


def _heal(
    cuts: dict[int, Healable], key: int, manifest: dict[str, Any], observer: Observer
) -> None:
    """Remove the routes of partition ``key`` (or the netem of entry ``key``); FleetError
    naming what is left if any is."""
    cut = cuts.get(key)
    if cut is None:
        return
    if isinstance(cut, PowerCut):
        observer.phase("fault: waiting for the hosts to come back, then starting their nodes")
        try:
            cut.heal()
        finally:
            del cuts[key]
        at_ms = int(time.time() * 1000)
        for i in cut.nodes:
            manifest["faults"].append({"action": "restart_node", "node": i, "at_ms": at_ms})
        return
    if isinstance(cut, linkfaults.LinkFault):
        observer.phase(f"fault: healing the link of node {cut.node}")
        _heal_link(cut, cuts, key, manifest)
        return
    observer.phase(f"fault: healing the {cut.label}")
    problems = cut.heal()
    del cuts[key]  # only now: interrupted half-way, the rest is healed on the way out
    entry: dict[str, Any] = {
        "action": "heal",
        "partition": cut.kind,
        "node": cut.node,
        "at_ms": int(time.time() * 1000),
    }
    manifest["faults"].append(entry)
    if cut.in_place:
        entry["error"] = partitions.unhealed_message(cut, problems)
        entry["routes_left"] = [[r.host, r.address] for r in sorted(cut.in_place)]
        raise FleetError(entry["error"])


def _heal_open(cuts: dict[int, Healable], manifest: dict[str, Any], observer: Observer) -> None:
    """Heal every partition still in place (the run ends early); errors are logged."""
    for key in sorted(cuts):
        try:
            _heal(cuts, key, manifest, observer)
        except MqlabError as e:
            LOG.error("%s", e)


def _end_fault(
    action: str,
    node: int,
    cluster: LocalCluster,
    manifest: dict[str, Any],
    observer: Observer,
    cuts: dict[int, Healable] | None = None,
) -> None:
    """The second half of a fault: a killed node restarted, every node restarted together
    after a crash (``node`` is then how many), a paused node resumed, a partition or a
    netem healed (``node`` is then its key in ``cuts``)."""
    if action == "heal":
        _heal(cuts if cuts is not None else {}, node, manifest, observer)
        return
    if action == "restart_all":  # after crash_all: every node together; ``node``: how many
        observer.phase("fault: restarting every node")
        cluster.restart_nodes(list(range(node)))
        at_ms = int(time.time() * 1000)
        for i in range(node):
            manifest["faults"].append({"action": "restart_node", "node": i, "at_ms": at_ms})
        return
    if action == "resume_node":
        observer.phase(f"fault: resuming node {node}")
        cluster.resume_node(node)
    else:
        observer.phase(f"fault: restarting node {node}")
        cluster.restart_node(node)
    manifest["faults"].append({"action": action, "node": node, "at_ms": int(time.time() * 1000)})


def _stop_workers(workers: list[_Worker], grace_s: float = STOP_GRACE_S) -> None:
    """Ask running workers to stop, then close their stdin; end them by force after ``grace_s``.

    A remote worker whose connection is gone reads EOF and stops by itself; its process
    group is also killed over a fresh connection if the host still answers.
    """
    running = [w for w in workers if not w.done]
    if not running:
        return
    _command(running, "stop")
    for w in running:
        w.proc.close_stdin()
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline and any(not w.done for w in running):
        for w in running:
            w.pump()
        time.sleep(0.1)
    for w in running:
        if w.done:
            continue
        pid = w.started.get("pid")
        if not w.host.is_local and pid:
            with contextlib.suppress(MqlabError):
                w.host.run(
                    f"kill -TERM -- -{int(pid)} 2>/dev/null; sleep 5; "
                    f"kill -KILL -- -{int(pid)} 2>/dev/null; true",
                    timeout_s=20,
                )
        w.proc.kill()
        rc = w.proc.poll()
        w.exit_code = -1 if rc is None else rc


def execute_files(
    paths: list[Path], results_dir: Path, observer: Observer | None = None
) -> list[RunResult]:
    scenarios = [s for p in paths for s in scenario_load.load_scenario(p)]
    with sigterm_as_interrupt():
        return execute(scenarios, results_dir, observer)
