"""CPU time of the processes a run is made of: a worker's own, and a local broker node's
process group, read per interval so the summary can say who ran out of cores.

- :func:`self_cpu_us`: this process, every thread (``getrusage(RUSAGE_SELF)``, µs).
- :func:`group_cpu_us`: every live process of some process groups, read from ``/proc``
  (``utime + stime``, plus ``cutime + cstime``: the time of children they reaped, so
  that a PostgreSQL backend that exits keeps counting in its postmaster). A group's
  total can only fall when a process leaves it (killed, reaped from outside): an
  interval's CPU is then taken as 0, never negative.
- :func:`host_cores`: the cores this process may run on (its CPU affinity).
"""

from __future__ import annotations

import os
import resource
import threading
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TextIO

from mqlab import clock
from mqlab.archive import codecs

CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
PROC = Path("/proc")


def host_cores() -> int:
    try:
        return len(os.sched_getaffinity(0)) or 1
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def self_cpu_us() -> tuple[int, int]:
    """(user, system) µs this process has used so far, all its threads."""
    r = resource.getrusage(resource.RUSAGE_SELF)
    return round(r.ru_utime * 1e6), round(r.ru_stime * 1e6)


def parse_stat(text: str) -> tuple[int, int, int] | None:
    """(process group, user ticks, system ticks) of a ``/proc/PID/stat`` line, the reaped
    children's ticks included; None when it does not parse."""
    _, sep, rest = text.rpartition(")")
    if not sep:
        return None
    fields = rest.split()
    try:  # fields after the name: state ppid pgrp ... utime(14) stime cutime cstime
        return int(fields[2]), int(fields[11]) + int(fields[13]), int(fields[12]) + int(fields[14])
    except (IndexError, ValueError):
        return None


def group_cpu_us(pgids: Iterable[int], proc: Path = PROC) -> dict[int, tuple[int, int]]:
    """(user, system) µs of the live processes of each process group in ``pgids`` (a
    group with none left: absent)."""
    wanted = set(pgids)
    ticks: dict[int, list[int]] = {}
    if not wanted:
        return {}
    for entry in os.scandir(proc):
        if not entry.name.isdigit():
            continue
        try:
            text = Path(entry.path, "stat").read_text(encoding="ascii", errors="replace")
        except OSError:  # gone since the listing
            continue
        parsed = parse_stat(text)
        if parsed is None or parsed[0] not in wanted:
            continue
        acc = ticks.setdefault(parsed[0], [0, 0])
        acc[0] += parsed[1]
        acc[1] += parsed[2]
    return {
        pgid: (u * 1_000_000 // CLOCK_TICKS, s * 1_000_000 // CLOCK_TICKS)
        for pgid, (u, s) in ticks.items()
    }


class GroupRecorder:
    """Writes, once per wall-clock second, the CPU each broker node's process group used
    into ``out_dir/node-NN/cpu.csv`` (the archive's ``cpu.csv``), from its own thread.

    ``groups()`` answers the nodes' current process groups (``{node: pgid}``; a node
    restarted by a fault comes back with a new group, whose time counts from zero)."""

    def __init__(
        self, groups: Callable[[], dict[int, int]], out_dir: Path, proc: Path = PROC
    ) -> None:
        self.groups = groups
        self.out_dir = out_dir
        self.proc = proc
        self._stop = threading.Event()
        self._files: dict[int, TextIO] = {}
        self._seen: dict[int, tuple[int, tuple[int, int]]] = {}  # node -> (pgid, totals)
        self._start_ms = clock.wall_ms()
        self._thread = threading.Thread(target=self._loop, name="broker-cpu", daemon=True)

    def start(self) -> GroupRecorder:
        self._read()  # the baseline: time used before the first interval is not counted
        self._thread.start()
        return self

    def _read(self) -> dict[int, tuple[int, tuple[int, int]]]:
        groups = self.groups()
        totals = group_cpu_us(groups.values(), self.proc)
        now = {node: (pgid, totals.get(pgid, (0, 0))) for node, pgid in groups.items()}
        if not self._seen:
            self._seen = now
        return now

    def tick(self, end_ms: int) -> None:
        """Close the interval that ends at ``end_ms``: one row per node."""
        now = self._read()
        for node, (pgid, (user, system)) in sorted(now.items()):
            before = self._seen.get(node)
            # a node (re)started since (a new group): all its time is new
            seen = (0, 0) if before is None or before[0] != pgid else before[1]
            f = self._files.get(node)
            if f is None:
                d = self.out_dir / f"node-{node:02d}"
                d.mkdir(parents=True, exist_ok=True)
                f = self._files[node] = open(d / "cpu.csv", "w", encoding="ascii")  # noqa: SIM115
                f.write(codecs.cpu_header())
            f.write(
                codecs.cpu_line(
                    self._start_ms,
                    end_ms - self._start_ms,
                    max(0, user - seen[0]),
                    max(0, system - seen[1]),
                )
            )
            f.flush()
        self._seen = now
        self._start_ms = end_ms

    def _loop(self) -> None:
        while True:
            boundary_ms = (clock.wall_ms() // 1000 + 1) * 1000
            if self._stop.wait(max(0.0, boundary_ms / 1000 - clock.wall_s())):
                break
            self.tick(boundary_ms)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)
        end_ms = clock.wall_ms()
        if end_ms > self._start_ms:
            self.tick(end_ms)
        for f in self._files.values():
            f.close()
