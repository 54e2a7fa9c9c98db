"""The impairer's command line: ``python -m mqlab.faults.impairer --dev DEV --queue N
--delay-ms MS [--jitter-ms MS] [--loss-pct P] [--seed N]`` or ``--remove-only``."""

from __future__ import annotations

import argparse
import logging
import math
import os
import select
import signal
import socket
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NoReturn, TextIO

from .common import EXIT_OK, EXIT_USAGE, MAX_QUEUE, FleetError, check_dev, check_queue
from .delay import Impairment, Scheduler
from .nfqueue import NfQueue, finish, serve
from .rules import add_rule, remove_rules


# -- the command line ----------------------------------------------------------------------
class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise FleetError(f"impair: {message} (see --help)")


def _parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog="python -m mqlab.faults.impairer",
        description="Delay, jitter and loss on this namespace's IPv4 egress on one device "
        "(NFQUEUE, in userspace). Prints 'ready', then a JSON line of counts at the end.",
    )
    p.add_argument("--dev", help="the link to impair (its egress), e.g. eth0")
    p.add_argument("--queue", type=int, help=f"NFQUEUE number, 0..{MAX_QUEUE}")
    p.add_argument("--delay-ms", type=float, default=0.0)
    p.add_argument("--jitter-ms", type=float, default=0.0)
    p.add_argument("--loss-pct", type=float, default=0.0)
    p.add_argument("--seed", type=int, default=None, help="seed of the loss and jitter draws")
    p.add_argument(
        "--loopback-here",
        action="store_true",
        help="allow --dev lo, in a network namespace other than the machine's own only "
        "(bench/lanes.py's)",
    )
    p.add_argument(
        "--remove-only",
        action="store_true",
        help="remove mqlab's leftover rules (of --queue only, if given) and exit",
    )
    return p


@dataclass(frozen=True)
class Options:
    """Impair ``dev`` through ``queue``."""

    dev: str
    queue: int
    impairment: Impairment
    seed: int | None = None
    loopback_here: bool = False  # dev may be lo (a namespace whose one link it is)


@dataclass(frozen=True)
class RemoveOnly:
    """Remove mqlab's rules (of ``queue`` only, unless None) and exit."""

    queue: int | None = None


def parse_args(argv: Sequence[str]) -> Options | RemoveOnly:
    """The CLI's options; FleetError (one line) on a malformed flag or a bad value."""
    a = _parser().parse_args(list(argv))
    if a.queue is not None:
        check_queue(a.queue)
    if a.remove_only:
        return RemoveOnly(a.queue)
    if a.dev is None or a.queue is None:
        raise FleetError("impair: --dev and --queue are required (or --remove-only)")
    for flag, value in (
        ("--delay-ms", a.delay_ms),
        ("--jitter-ms", a.jitter_ms),
        ("--loss-pct", a.loss_pct),
    ):
        if not math.isfinite(value) or value < 0:
            raise FleetError(f"impair: {flag} {value:g}: must be a number >= 0")
    if a.loss_pct > 100:
        raise FleetError(f"impair: --loss-pct {a.loss_pct:g}: must be at most 100")
    impairment = Impairment(a.delay_ms, a.jitter_ms, a.loss_pct)
    dev = check_dev(a.dev, a.loopback_here)
    return Options(dev, a.queue, impairment, a.seed, a.loopback_here)


def command(
    dev: str,
    queue: int,
    impairment: Impairment,
    seed: int | None = None,
    python: str = "python3",
) -> list[str]:
    """The command line that impairs ``dev`` in the namespace it runs in."""
    cmd = [python, "-m", "mqlab.faults.impairer", "--dev", check_dev(dev)]
    cmd += ["--queue", str(check_queue(queue))]
    cmd += ["--delay-ms", f"{impairment.delay_ms!r}", "--jitter-ms", f"{impairment.jitter_ms!r}"]
    cmd += ["--loss-pct", f"{impairment.loss_pct!r}"]
    if seed is not None:
        cmd += ["--seed", str(seed)]
    return cmd


def remove_only_command(queue: int | None = None, python: str = "python3") -> list[str]:
    cmd = [python, "-m", "mqlab.faults.impairer", "--remove-only"]
    return cmd if queue is None else [*cmd, "--queue", str(check_queue(queue))]


def _stdin_fd() -> int | None:
    try:
        os.fstat(0)
    except OSError:
        return None  # no stdin at all: only a signal ends it
    return 0


def impair(opts: Options, out: TextIO) -> int:
    """Bind, add the rule, say ``ready``, impair until told to stop, clean up, count."""
    scheduler = Scheduler(opts.impairment, opts.seed)
    wake_r, wake_w = socket.socketpair()
    wake_r.setblocking(False)
    wake_w.setblocking(False)
    stopping: list[int] = []

    def on_signal(signum: int, _frame: Any) -> None:
        stopping.append(signum)

    old_wakeup = signal.set_wakeup_fd(wake_w.fileno())
    old = {s: signal.signal(s, on_signal) for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)}
    nfq: NfQueue | None = None
    code = EXIT_OK
    try:
        nfq = NfQueue.open(opts.queue)
        add_rule(opts.dev, opts.queue, opts.loopback_here)
        try:
            print("ready", file=out, flush=True)
            stdin = _stdin_fd()
            stop_fds = [wake_r.fileno()] + ([] if stdin is None else [stdin])
            while not stopping:
                serve(nfq, scheduler, stop_fds)
                if stdin is not None and _stdin_ended(stdin):
                    break
                _drain(wake_r)
        finally:
            try:
                remove_rules(opts.queue)
            except FleetError as e:
                print(str(e), file=sys.stderr)
                code = EXIT_USAGE
            finish(nfq, scheduler)
            scheduler.counts.enobufs = nfq.enobufs
            print(scheduler.counts.to_line(), file=out, flush=True)
    finally:
        if nfq is not None:
            nfq.close()
        for s, handler in old.items():
            signal.signal(s, handler)
        signal.set_wakeup_fd(old_wakeup)
        wake_r.close()
        wake_w.close()
    return code


def _stdin_ended(fd: int) -> bool:
    """Read what is on stdin (ignored); True at end of file."""
    r, _, _ = select.select([fd], [], [], 0)
    if not r:
        return False
    try:
        return os.read(fd, 4096) == b""
    except OSError:
        return True


def _drain(sock: socket.socket) -> None:
    try:
        while sock.recv(4096):
            pass
    except BlockingIOError:
        pass


def main(argv: Sequence[str] | None = None, out: TextIO | None = None) -> int:
    """``python -m mqlab.faults.impairer ...``: exit 0 when done, 2 with one line on stderr
    for a bad argument or an environment problem."""
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr, format="impair: %(message)s")
    out = out or sys.stdout
    try:
        opts = parse_args(sys.argv[1:] if argv is None else argv)
        if isinstance(opts, RemoveOnly):
            remove_rules(opts.queue)
            return EXIT_OK
        return impair(opts, out)
    except FleetError as e:
        print(str(e), file=sys.stderr)
        return e.exit_code
