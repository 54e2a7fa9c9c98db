"""Senders: every sender process started and connected, then all of them started on one
command (``go``): the measured run starts there, so imports and connects never eat the
warm-up."""

from __future__ import annotations

import time

from mqlab.run import workers
from mqlab.run.context import RunContext
from mqlab.run.receivers import start_role, where
from mqlab.workload.protocol import Go, Measure


def start(ctx: RunContext) -> None:
    s = ctx.scenario
    ctx.senders = start_role(ctx, "sender")
    line = workers.shape_line(ctx.shape["sender"], s.clients.sender_threads)
    ctx.observer.phase(f"senders: {line} on {where(ctx.senders)}")
    workers.wait_ready(ctx.senders)  # connected, about to send
    paths = sorted({w.send_path for w in ctx.senders if w.send_path})
    ctx.manifest.clients.send_paths = paths


def go(ctx: RunContext) -> None:
    """Start every sender now; the measured period starts after the warm-up."""
    start_ms = int(time.time() * 1000)
    warmup_end_ms = start_ms + int(ctx.scenario.workload.warmup_s * 1000)
    # every worker closes an interval there, so the measured period starts on a boundary:
    # receivers are told before the senders start and, without a warm-up, have answered
    # before they do (a receiver that took the command late closes its interval then:
    # nothing is received before it begins); senders close one at their start anyway, so
    # they are told only of a warm-up's end, after it (an interval closed at once would
    # delay their start)
    workers.command(ctx.receivers, Measure(warmup_end_ms))
    if warmup_end_ms == start_ms:
        workers.wait_measuring(ctx.receivers, warmup_end_ms)
    workers.command(ctx.senders, Go(start_ms))
    if warmup_end_ms > start_ms:
        workers.command(ctx.senders, Measure(warmup_end_ms))
    ctx.manifest.measure.start_ms = start_ms
    ctx.manifest.measure.warmup_end_ms = warmup_end_ms
    ctx.save()
