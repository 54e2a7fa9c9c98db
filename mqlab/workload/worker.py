"""One client node: a process running sender or receiver threads and recording.

``python -m mqlab.workload.worker SPEC.json`` — the same entry point runs locally
(started by mqlab run) and on remote client nodes (started over Fabric).

Control files in ``spec.control_dir`` (polled), written by the coordinator:
``go`` is the common start of every sender (written once all workers are ready);
``receivers-stop`` ends the receivers' drain (the broker holds nothing more, or the
drain deadline passed); ``stop`` ends the worker now, gracefully. SIGINT/SIGTERM
also stop it gracefully. Whatever happens, the worker writes what it recorded,
``worker.json`` last.
"""

from __future__ import annotations

import logging
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

from mqlab import typed
from mqlab.drivers import registry
from mqlab.drivers.base import Endpoints
from mqlab.results.archive import layout
from mqlab.results.archive.formats import write_json
from mqlab.results.archive.records import (
    WorkerRecord,
    write_delivery,
    write_sent,
    write_worker,
)
from mqlab.scenario import Workload
from mqlab.workload import envelope
from mqlab.workload.recorder import IntervalRecorder, ReceiverStats, SenderStats, now_ms
from mqlab.workload.spec import WorkerSpec
from mqlab.workload.threads import run_receiver, run_sender

LOG = logging.getLogger("mqlab.worker")
EXIT_OK, EXIT_FAILED, EXIT_INTERRUPTED = 0, 3, 4


class Worker:
    def __init__(self, spec: WorkerSpec):
        self.spec = spec
        self.out = Path(spec.out_dir)
        self.control = Path(spec.control_dir)
        self.stop = threading.Event()
        self.interrupted = False
        self.errors: list[str] = []
        self.workload = typed.build(Workload, spec.workload, Path("worker-spec"), "workload")
        cls = registry.driver_class(spec.broker)
        settings: Any = typed.build(cls.Settings, spec.settings, Path("worker-spec"), "settings")
        self.driver = cls(settings, Endpoints.from_json(spec.endpoints), spec.queue)
        self.started_ms = now_ms()
        self.recorder = IntervalRecorder(
            self.out, spec.role, spec.worker_id, spec.run_id, self.started_ms
        )
        self.go = threading.Event()
        self.go_ms: int | None = None

    # -- threads ----------------------------------------------------------------
    def _guard(self, fn: Any, *args: Any) -> None:
        try:
            fn(*args)
        except BaseException as exc:  # noqa: BLE001 - recorded, then the worker stops
            LOG.error("thread failed: %s", exc)
            self.errors.append(f"{type(exc).__name__}: {exc}"[:500])
            self.stop.set()

    def _start_threads(self, ready: threading.Barrier) -> list[threading.Thread]:
        spec, w = self.spec, self.workload
        threads = []
        if spec.role == "sender":
            pool = envelope.PayloadPool(w.message_bytes, seed=spec.seed)
            for t in range(spec.threads):
                stats = SenderStats(spec.node * spec.threads + t)
                self.recorder.senders.append(stats)
                args = (
                    run_sender,
                    self.driver,
                    w,
                    stats,
                    pool,
                    spec.seed * 1000 + t,
                    self.stop,
                    ready,
                    self.go,
                )
                threads.append(threading.Thread(target=self._guard, args=args, name=f"send-{t}"))
        else:
            for t in range(spec.threads):
                rstats = ReceiverStats()
                self.recorder.receivers.append(rstats)
                rargs = (run_receiver, self.driver, w, rstats, self.stop, ready)
                threads.append(threading.Thread(target=self._guard, args=rargs, name=f"recv-{t}"))
        for th in threads:
            th.daemon = True
            th.start()
        return threads

    def _ticker(self) -> None:
        while not self.stop.is_set():
            boundary_ms = (now_ms() // 1000 + 1) * 1000
            if self.stop.wait(max(0.0, boundary_ms / 1000 - time.time())):
                break
            self.recorder.tick(boundary_ms)
            write_json(self.out / "progress.json", {"totals": self.recorder.totals})

    def _start_sending(self) -> None:
        """The common start: close the interval before it, so that one begins there."""
        self.go_ms = now_ms()
        if self.go_ms > self.recorder.interval_start_ms:
            self.recorder.tick(self.go_ms)
        self.go.set()

    # -- main -----------------------------------------------------------------
    def run(self) -> int:
        spec = self.spec
        ready = threading.Barrier(spec.threads + 1)
        threads = self._start_threads(ready)
        try:
            ready.wait(timeout=60)
        except threading.BrokenBarrierError:
            self.errors.append("threads did not connect within 60 s")
            self.stop.set()
        (self.out / "ready").write_text("ok\n")
        ticker = threading.Thread(target=self._ticker, name="ticker", daemon=True)
        ticker.start()
        deadline = time.monotonic() + self.workload.max_run_s
        while not self.stop.is_set():
            if (self.control / "stop").exists() or time.monotonic() > deadline:
                self.interrupted = True
                break
            if spec.role == "sender":
                if not self.go.is_set() and (self.control / "go").exists():
                    self._start_sending()
                if self.go.is_set() and not any(t.is_alive() for t in threads):
                    break
            elif (self.control / "receivers-stop").exists():
                break
            self.stop.wait(0.005 if not self.go.is_set() and spec.role == "sender" else 0.05)
        self.stop.set()
        for t in threads:
            t.join(timeout=30)
        ticker.join(timeout=5)
        return self.finish()

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
            ),
        )
        self.driver.close()
        return {"ok": EXIT_OK, "failed": EXIT_FAILED, "interrupted": EXIT_INTERRUPTED}[status]


def main(argv: list[str]) -> int:
    logging.basicConfig(
        level=logging.WARNING,
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    spec = WorkerSpec.read(Path(argv[1]))
    worker = Worker(spec)

    def on_signal(signum: int, _frame: Any) -> None:
        worker.interrupted = True
        worker.stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    return worker.run()


if __name__ == "__main__":
    sys.exit(main(sys.argv))
