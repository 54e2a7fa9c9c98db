"""The worker life cycle: specs for each worker process of a role, spawning them on
their hosts (attached by stdin/stdout, :mod:`mqlab.hosts.host`), waiting until they are
ready, commanding them, their totals, stopping them, and fetching their folders back."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from mqlab import typed
from mqlab.archive import layout
from mqlab.archive.formats import read_json
from mqlab.errors import ClusterError, FleetError, MqlabError
from mqlab.hosts.base import Attached, Host
from mqlab.labs.placement import Placement
from mqlab.run.clocks import corrections
from mqlab.scenario.model import Scenario
from mqlab.workload import protocol
from mqlab.workload.spec import WorkerSpec, processes

LOG = logging.getLogger(__name__)
READY_TIMEOUT_S = 90.0
STOP_GRACE_S = 30.0
MEASURING_WAIT_S = 10.0  # receivers answering ``measure`` before the senders start


@dataclass
class Worker:
    """One worker process on a host, attached by stdin/stdout."""

    spec: WorkerSpec
    host: Host
    proc: Attached
    remote_dir: PurePosixPath  # its folder on the host
    dir: Path  # its folder in the archive
    ready: bool = False
    started: protocol.Started | None = None
    totals: dict[str, int] = field(default_factory=dict)
    exit_code: int | None = None
    fetched: str | None = None  # why the folder could not be fetched, if so
    send_path: str | None = None  # senders: how they send (WorkerRecord.send_path)
    receive_path: str | None = None  # receivers: how they receive (WorkerRecord.receive_path)
    measuring: int | None = None  # the last ``measure`` it took (its at_ms)

    def pump(self) -> None:
        """Take the events it sent since the last call."""
        for line in self.proc.take():
            ev = protocol.parse_event(line)
            if ev is None:
                LOG.debug("%s: %s", self.spec.worker_id, line)
            elif isinstance(ev, protocol.Ready):
                self.ready = True
                self.send_path = ev.send_path
                self.receive_path = ev.receive_path
            elif isinstance(ev, protocol.Measuring):
                self.measuring = ev.at_ms
            elif isinstance(ev, protocol.Progress | protocol.Done):
                self.totals = dict(ev.totals)
            elif isinstance(ev, protocol.Started):
                self.started = ev

    @property
    def returncode(self) -> int | None:
        if self.exit_code is None:
            self.exit_code = self.proc.poll()
        return self.exit_code

    @property
    def done(self) -> bool:
        return self.returncode is not None


def worker_status(w: Worker) -> dict[str, Any]:
    info: dict[str, Any] = {
        "id": w.spec.worker_id,
        "role": w.spec.role,
        "node": w.spec.node,
        "process": w.spec.process,
        "host": w.host.name,
        "address": w.host.address,
        "exit_code": w.returncode,
    }
    if w.started and w.started.prefix and not w.host.is_local:  # local runs: no local paths
        info["interpreter_prefix"] = w.started.prefix
    if w.fetched:
        info["fetch_error"] = w.fetched
    try:
        info["status"] = read_json(w.dir / layout.WORKER)["status"]
    except MqlabError:
        info["status"] = "lost"  # died (or its host was lost) before its record came back
    return info


def spawn(
    spec: WorkerSpec, host: Host, placement: Placement, remote_dir: PurePosixPath, run_dir: Path
) -> Worker:
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
    return Worker(spec, host, proc, remote_dir, local_dir)


def client_processes(s: Scenario, placement: Placement) -> dict[str, list[int]]:
    """Worker processes per client node, by role (``{"sender": [node 0's, ...],
    "receiver": [...]}``), over which the node's threads of that role are spread evenly
    (:func:`mqlab.workload.spec.split`): the scenario's ``processes_per_node``, else the
    cores of each node's host (``os.cpu_count()`` on this machine, ``nproc`` on a remote
    host; each host asked once), lowered to the largest number of processes that
    divides the role's threads (never more than the threads: a process without a thread
    would be idle; 8 threads on 6 cores: 4 processes of 2; 2 threads on 16 cores: 2 of
    1; 5 threads on 2 cores: 1 of 5), so every process of a role has the same threads
    and the run's tables (processes x threads per process) say the node's threads. The
    load does not depend on the answer: a node runs the role's threads in all."""
    c = s.clients
    cores: dict[str, int] = {}

    def of(host: Host, threads: int) -> int:
        if c.processes_per_node is not None:
            return dividing(threads, c.processes_per_node)
        if host.name not in cores:
            cores[host.name] = _cores(host)
        return dividing(threads, cores[host.name])

    return {
        "sender": [of(placement.sender_host(i), c.sender_threads) for i in range(c.sender_nodes)],
        "receiver": [
            of(placement.receiver_host(i), c.receiver_threads) for i in range(c.receiver_nodes)
        ],
    }


def dividing(threads: int, at_most: int) -> int:
    """The most processes, at most ``at_most``, that ``threads`` split into evenly."""
    return max(p for p in range(1, min(threads, at_most) + 1) if threads % p == 0)


def _cores(host: Host) -> int:
    if host.is_local:
        return os.cpu_count() or 1
    out = host.run(["nproc"], timeout_s=30).out.strip()
    if not out.isdigit() or int(out) < 1:
        raise FleetError(f"{host.name}: nproc answered {out!r}, not a number of cores")
    return int(out)


def shape_line(per_node: Sequence[int], threads: int) -> str:
    """``2 node(s) x 4 threads (2 processes each)`` (what a role runs: ``threads`` per
    node, spread over its processes), for the progress line."""
    each = (
        f"{per_node[0]} process(es) each"
        if len(set(per_node)) == 1
        else f"{sum(per_node)} processes in all"
    )
    return f"{len(per_node)} node(s) x {threads} threads ({each})"


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
    (:func:`client_processes`), sharing the node's threads of the role evenly; ids, sender ids,
    receiver indexes (hence each thread's queue of ``queues``) and seeds as
    ``mqlab.workload.spec`` and ``layout.worker_id`` say, so one process per node gives
    the specs runs always had."""
    c = s.clients
    threads = c.sender_threads if role == "sender" else c.receiver_threads
    per_node = shape[role]
    out = []
    for proc in processes(per_node, threads):
        i = proc.node
        host = placement.sender_host(i) if role == "sender" else placement.receiver_host(i)
        wid = layout.worker_id(role, i, proc.process, per_node[i])
        remote_dir = placement.runs_dir(host, run_dir) / wid
        spec = WorkerSpec(
            run_id=run_id,
            worker_id=wid,
            role=role,
            node=i,
            threads=proc.threads,
            broker=s.broker,
            settings=typed.to_table(s.profile.settings),
            endpoints=endpoints,
            queues=list(queues),
            workload=typed.to_table(s.workload),
            out_dir=str(remote_dir),
            seed=proc.seed(role),
            host=host.name,
            clock_corrections_us=corrections(s, placement, before, host, shape["sender"])
            if role == "receiver"
            else {},
            process=proc.process,
            first_sender_id=proc.first if role == "sender" else 0,
            first_receiver_index=proc.first if role == "receiver" else 0,
        )
        out.append((spec, host, remote_dir))
    return out


def wait_ready(workers: list[Worker]) -> None:
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


def wait_measuring(workers: list[Worker], at_ms: int, bound_s: float = MEASURING_WAIT_S) -> bool:
    """Wait (at most ``bound_s``) until every live worker answered ``measure at_ms``;
    False if one did not in time (logged: its first interval may then begin late)."""
    deadline = time.monotonic() + bound_s
    while True:
        for w in workers:
            w.pump()
        late = [w for w in workers if w.measuring != at_ms and not w.done]
        if not late:
            return True
        if time.monotonic() >= deadline:
            names = ", ".join(w.spec.worker_id for w in late)
            LOG.warning("no answer to measure %d within %.0f s from %s", at_ms, bound_s, names)
            return False
        time.sleep(0.001)


def totals(workers: list[Worker]) -> dict[str, int]:
    out: dict[str, int] = {}
    for w in workers:
        w.pump()
        for k, v in w.totals.items():
            out[k] = out.get(k, 0) + v
    return out


def command(workers: list[Worker], cmd: protocol.Command) -> None:
    text = protocol.command_line(cmd)
    for w in workers:
        if not w.done:
            w.proc.send(text)


def fetch_workers(workers: list[Worker], phase: Callable[[str], None]) -> None:
    """Bring every remote worker's folder into the archive; clean the hosts' run folders."""
    remote = [w for w in workers if not w.host.is_local]
    if remote:
        phase(f"fetching {len(remote)} worker folder(s) from their hosts")
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


def stop_workers(workers: list[Worker], grace_s: float = STOP_GRACE_S) -> None:
    """Ask running workers to stop, then close their stdin; end them by force after ``grace_s``.

    A remote worker whose connection is gone reads EOF and stops by itself; its process
    group is also killed over a fresh connection if the host still answers.
    """
    running = [w for w in workers if not w.done]
    if not running:
        return
    command(running, protocol.Stop())
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
        pid = w.started.pid if w.started else None
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
