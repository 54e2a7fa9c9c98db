"""One worker process of a client node: sender or receiver threads, and recording.

``python -m mqlab.workload.worker SPEC.json`` — the same entry point runs locally and
on remote hosts (from the shipped bundle); the coordinator attaches to its stdin and
stdout through ``mqlab.hosts`` in both cases.

Commands on stdin, events on stdout, as :mod:`mqlab.workload.protocol` defines them
(``go``, ``measure``, ``receivers-stop``, ``stop``; ``started``, ``ready``,
``progress``, ``done``). EOF on stdin (the coordinator died, or the SSH connection was
lost) stops it too, as do SIGINT/SIGTERM/SIGHUP. Whatever happens, the worker writes
what it recorded, ``worker.json`` last.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
import time
from pathlib import Path
from typing import IO, Any

from mqlab import clock, cpu, envelope, typed
from mqlab.archive import layout
from mqlab.archive.records import WorkerRecord, write_delivery, write_sent, write_worker
from mqlab.brokers import registry
from mqlab.brokers.base import Driver, Endpoints
from mqlab.scenario.model import Workload
from mqlab.workload import protocol
from mqlab.workload.lanes import Signal
from mqlab.workload.recorder import IntervalRecorder, ReceiverStats, now_ms
from mqlab.workload.recvlanes import run_receiver_lanes
from mqlab.workload.senderstats import Cuts, SenderStats
from mqlab.workload.spec import WorkerSpec, queue_of
from mqlab.workload.threads import (
    WATERMARK_WAIT_S,
    run_receiver,
    run_sender,
    run_sender_lanes,
)

LOG = logging.getLogger("mqlab.worker")
EXIT_OK, EXIT_FAILED, EXIT_INTERRUPTED = 0, 3, 4


class Worker:
    def __init__(self, spec: WorkerSpec, commands: IO[str], events: IO[str]):
        self.spec = spec
        self.out = Path(spec.out_dir)
        self._in = commands
        self._out = events
        self._out_lock = threading.Lock()
        self.commands: set[str] = set()
        self.stop = Signal()  # wakes the lanes' compiled loops, the ticker and run()
        # run()'s loop waits on this: a command, a thread that ended, or stop sets it
        self.attention = threading.Event()
        self.stop.listen(self.attention.set)
        self._ended = 0  # threads (of _start_threads) that returned
        self._ended_lock = threading.Lock()
        self.interrupted = False
        self.errors: list[str] = []
        self.workload = typed.build(Workload, spec.workload, Path("worker-spec"), "workload")
        cls = registry.driver_class(spec.broker)
        settings: Any = typed.build(cls.Settings, spec.settings, Path("worker-spec"), "settings")
        endpoints = Endpoints.from_json(spec.endpoints)
        # thread t's queue: its sender id or receiver index modulo the run's queues; one
        # driver per queue this process's threads use
        first = spec.first_sender_id if spec.role == "sender" else spec.first_receiver_index
        self.thread_queues = [
            spec.queues[queue_of(first + t, len(spec.queues))] for t in range(spec.threads)
        ]
        self.drivers: dict[str, Driver] = {
            q: cls(settings, endpoints, q) for q in dict.fromkeys(self.thread_queues)
        }
        # senders of a driver that drives them together: one thread for all
        self.in_lanes = (
            spec.role == "sender"
            and spec.threads > 0
            and spec.lanes
            and all(d.sends_in_lanes() for d in self.drivers.values())
        )
        # receivers of a driver that drives them together: one thread for all
        self.recv_in_lanes = (
            spec.role != "sender"
            and spec.threads > 0
            and spec.lanes
            and all(d.receives_in_lanes() for d in self.drivers.values())
        )
        self.send_path: str | None = None
        if spec.role == "sender":  # lanes are always compiled (mqlab._sendpath)
            driver = next(iter(self.drivers.values()), None)
            per_thread = driver.send_path() if driver is not None else "python"
            self.send_path = "compiled-lanes" if self.in_lanes else per_thread
        self.receive_path: str | None = None
        if spec.role != "sender":  # in lanes: the driver's (Python or compiled); else a thread each
            driver = next(iter(self.drivers.values()), None)
            lanes_path = driver.receive_path() if driver is not None else "python"
            self.receive_path = lanes_path if self.recv_in_lanes else "python"
        self.started_ms = now_ms()
        self.recorder = IntervalRecorder(
            self.out, spec.role, spec.worker_id, spec.run_id, self.started_ms
        )
        self.go = threading.Event()
        self.go_ms: int | None = None
        self.measure_ms: int | None = None  # the measured period's start, once told
        self.measure_told = threading.Event()  # wakes the ticker when it is told
        self.stop.listen(self.measure_told.set)  # and when the worker stops
        self.cuts = Cuts()  # where intervals end: the senders' runs end there too

    # -- threads ----------------------------------------------------------------
    def _guard(self, fn: Any, *args: Any) -> None:
        try:
            fn(*args)
        except BaseException as exc:  # noqa: BLE001 - recorded, then the worker stops
            LOG.error("thread failed: %s", exc)
            self.errors.append(f"{type(exc).__name__}: {exc}"[:500])
            self.stop.set()
        finally:
            with self._ended_lock:
                self._ended += 1
            self.attention.set()

    def _start_threads(self, ready: threading.Barrier) -> list[threading.Thread]:
        spec, w = self.spec, self.workload
        threads = []
        if spec.role == "sender":
            pool = envelope.PayloadPool(w.message_bytes, seed=spec.seed)
            stats = [SenderStats(spec.first_sender_id + t) for t in range(spec.threads)]
            self.recorder.senders += stats
            drivers = [self.drivers[q] for q in self.thread_queues]
            seeds = [spec.seed * 1000 + t for t in range(spec.threads)]
            if self.in_lanes:
                args: tuple[Any, ...] = (
                    run_sender_lanes,
                    drivers,
                    w,
                    stats,
                    pool,
                    seeds,
                    self.stop,
                    ready,
                    self.go,
                    self.cuts,
                )
                threads.append(threading.Thread(target=self._guard, args=args, name="send-lanes"))
            for t in range(0 if self.in_lanes else spec.threads):
                args = (
                    run_sender,
                    drivers[t],
                    w,
                    stats[t],
                    pool,
                    seeds[t],
                    self.stop,
                    ready,
                    self.go,
                    self.cuts,
                )
                threads.append(threading.Thread(target=self._guard, args=args, name=f"send-{t}"))
        else:
            # end-to-end latencies of senders on other hosts: minus the clocks' difference
            self.recorder.correct_clocks(spec.clock_corrections_us)
            rstats_all = [ReceiverStats() for _ in range(spec.threads)]
            self.recorder.receivers += rstats_all
            rdrivers = [self.drivers[q] for q in self.thread_queues]
            if self.recv_in_lanes:
                rargs: tuple[Any, ...] = (
                    run_receiver_lanes,
                    rdrivers,
                    w,
                    rstats_all,
                    self.stop,
                    ready,
                    self.cuts,
                )
                threads.append(threading.Thread(target=self._guard, args=rargs, name="recv-lanes"))
            for t in range(0 if self.recv_in_lanes else spec.threads):
                rstats, driver = rstats_all[t], rdrivers[t]
                rargs = (run_receiver, driver, w, rstats, self.stop, ready)
                threads.append(threading.Thread(target=self._guard, args=rargs, name=f"recv-{t}"))
        for th in threads:
            th.daemon = True
            th.start()
        return threads

    def _ticker(self) -> None:
        """Close an interval at every whole second, and at the measured period's start
        (``measure MS`` from the coordinator): the summary counts the intervals that
        start at or after it, so without that boundary whatever a worker did in the
        second it falls in would be left out (all of a run shorter than that second)."""
        while not self.stop.is_set():
            now = now_ms()
            boundary_ms = (now // 1000 + 1) * 1000
            measure = self.measure_ms
            if measure is not None and measure <= self.recorder.interval_start_ms:
                self.measure_ms = measure = None  # an interval starts at or after it already
            if measure is not None and measure < boundary_ms:
                boundary_ms = max(measure, now)  # told when it had come: an interval starts now
            wait_s = boundary_ms / 1000 - clock.wall_s()
            if wait_s > 0:
                # a measure command and stop wake the ticker at once; the cut is looked
                # at again at least once a second (a wall clock stepped back)
                if self.measure_told.wait(min(wait_s, 1.0)):
                    self.measure_told.clear()
                    continue
                if self.stop.is_set():
                    break
                if now_ms() < boundary_ms:
                    continue
            # senders recording runs, receivers in lanes: what they confirmed or received
            # before the cut is recorded first
            self.recorder.wait_for_records(boundary_ms, WATERMARK_WAIT_S)
            self.recorder.tick(boundary_ms)
            if measure is not None and boundary_ms >= measure:
                self.measure_ms = None

    def _start_sending(self) -> None:
        """The common start: close the interval before it, so that one begins there."""
        self.go_ms = now_ms()
        if self.go_ms > self.recorder.interval_start_ms:
            self.recorder.tick(self.go_ms)
        self.go.set()

    # -- main -----------------------------------------------------------------
    def _emit(self, event: protocol.Event) -> None:
        """One JSON line to the coordinator; a closed pipe (coordinator gone) stops us."""
        try:
            with self._out_lock:
                self._out.write(protocol.event_line(event) + "\n")
                self._out.flush()
        except (OSError, ValueError):
            self.interrupted = True
            self.stop.set()

    def _measure(self, at_ms: int) -> None:
        """The measured period starts at ``at_ms``: the ticker closes an interval there.
        A receiver told once it has come closes one now, before it answers ``measuring``:
        the coordinator starts the senders of a run without warm-up on that answer, so no
        receipt falls in an interval begun before the period (a sender's cut waits for
        its watermark, so the ticker makes it)."""
        self.cuts.set_measure(at_ms)
        now = now_ms()
        if self.spec.role != "sender" and at_ms <= now and now > self.recorder.interval_start_ms:
            # receivers in lanes, woken by the cut's change, record what came before it
            self.recorder.wait_for_records(now, WATERMARK_WAIT_S)
            self.recorder.tick(now)
        self.measure_ms = at_ms
        self.measure_told.set()
        self._emit(protocol.Measuring(at_ms))

    def _commands(self) -> None:
        """Read the coordinator's commands from stdin; EOF (it or the SSH link is gone) stops."""
        for line in self._in:
            cmd = protocol.parse_command(line)
            if isinstance(cmd, protocol.Go):
                self.commands.add("go")
            elif isinstance(cmd, protocol.Measure):
                self._measure(cmd.at_ms)
            elif isinstance(cmd, protocol.ReceiversStop):
                self.commands.add("receivers-stop")
            elif isinstance(cmd, protocol.Stop):
                break
            self.attention.set()
        self.commands.add("stop")
        self.attention.set()

    def run(self) -> int:
        spec = self.spec
        together = self.in_lanes or self.recv_in_lanes
        ready = threading.Barrier((1 if together else spec.threads) + 1)
        threading.Thread(target=self._commands, name="commands", daemon=True).start()
        threads = self._start_threads(ready)
        try:
            ready.wait(timeout=60)
        except threading.BrokenBarrierError:
            self.errors.append("threads did not connect within 60 s")
            self.stop.set()
        self._emit(protocol.Ready(self.send_path or None, self.receive_path or None))
        ticker = threading.Thread(target=self._ticker, name="ticker", daemon=True)
        ticker.start()
        deadline = time.monotonic() + self.workload.max_run_s
        next_progress = time.monotonic() + 0.5
        while not self.stop.is_set():
            self.attention.clear()  # what comes after this wakes the wait below
            if "stop" in self.commands or time.monotonic() > deadline:
                self.interrupted = True
                break
            if spec.role == "sender":
                if not self.go.is_set() and "go" in self.commands:
                    self._start_sending()
                if self.go.is_set() and self._ended >= len(threads):
                    break
            elif "receivers-stop" in self.commands:
                break
            if time.monotonic() >= next_progress:
                next_progress += 0.5
                self._emit(protocol.Progress(dict(self.recorder.totals)))
            # commands, ended threads and stop wake it; else the next progress or deadline
            self.attention.wait(max(0.0, min(next_progress, deadline) - time.monotonic()))
        self.stop.set()
        # a thread inside a call ends it within the driver's timeouts (a batch in flight,
        # a connect first); it then records what it holds
        until = time.monotonic() + self._longest_call_s() + 10
        for t in threads:
            t.join(timeout=max(0.0, until - time.monotonic()))
            if t.is_alive():
                self.errors.append(f"thread {t.name} still in a call after the drivers' timeouts")
        ticker.join(timeout=5)
        code = self.finish()
        self._emit(protocol.Done(code, dict(self.recorder.totals)))
        return code

    def _longest_call_s(self) -> float:
        """The longest one send or receive call can take: every timeout of the profile's
        settings added up (a call may connect, then wait for its batch), at least 30 s."""
        total = 0.0
        for name, value in self.spec.settings.items():
            if isinstance(value, int | float) and not isinstance(value, bool):
                if name.endswith("_timeout_s"):
                    total += float(value)
                elif name.endswith("_timeout_ms"):
                    total += value / 1000
        cls = registry.driver_class(self.spec.broker)
        defaults: Any = typed.build(cls.Settings, {}, Path("worker-spec"), "settings")
        for name in getattr(defaults, "__dataclass_fields__", {}):
            if name not in self.spec.settings and name.endswith(("_timeout_s", "_timeout_ms")):
                value = getattr(defaults, name)
                total += value / 1000 if name.endswith("_ms") else value
        return max(30.0, total)

    def finish(self) -> int:
        ended = now_ms()
        rec = self.recorder
        rec.tick(max(ended, rec.interval_start_ms))
        rec.close()
        if self.spec.role == "sender":
            write_sent(self.out / layout.SENT, {s.sender_id: s.sent_record() for s in rec.senders})
        else:
            write_delivery(self.out / layout.DELIVERY, rec.delivery.record())
        status = "failed" if self.errors else "interrupted" if self.interrupted else "ok"
        write_worker(
            self.out / layout.WORKER,
            WorkerRecord(
                worker_id=self.spec.worker_id,
                role=self.spec.role,
                node=self.spec.node,
                process=self.spec.process,
                threads=self.spec.threads,
                sender_ids=[s.sender_id for s in rec.senders],
                started_ms=self.started_ms,
                go_ms=self.go_ms,
                ended_ms=ended,
                status=status,
                error="; ".join(self.errors) or None,
                messages=dict(rec.totals),
                out_of_range=rec.out_of_range,
                foreign=rec.delivery.foreign,
                cores=cpu.host_cores(),
                send_path=self.send_path,
                receive_path=self.receive_path,
            ),
        )
        for driver in self.drivers.values():
            driver.close()
        return {"ok": EXIT_OK, "failed": EXIT_FAILED, "interrupted": EXIT_INTERRUPTED}[status]


def main(argv: list[str]) -> int:
    """``python -m mqlab.workload.worker SPEC.json``: commands on stdin, events on stdout."""
    logging.basicConfig(
        level=logging.WARNING,
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    out = sys.stdout
    sys.stdout = sys.stderr  # nothing else may write into the event stream
    started = protocol.Started(os.getpid(), sys.prefix, str(Path(__file__).resolve().parent.parent))
    print(protocol.event_line(started), file=out, flush=True)
    spec = WorkerSpec.read(Path(argv[1]))
    worker = Worker(spec, sys.stdin, out)

    def on_signal(signum: int, _frame: Any) -> None:
        worker.interrupted = True
        worker.stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGHUP, on_signal)
    return worker.run()


if __name__ == "__main__":
    sys.exit(main(sys.argv))
