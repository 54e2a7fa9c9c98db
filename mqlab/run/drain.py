"""Drain: after the senders stop, receivers go on until the broker holds nothing for any
of the run's queues (asked every half second, twice in a row) or until the drain
deadline; then the broker is asked once more what it still holds (``undrained.json``).

A broker whose count cannot see what a receive took and no receiver got
(``Driver.hides_cut_off_receives``: RocketMQ's pops, which a fault can cut off) is
trusted to be empty only once its redelivery timeout, and ``REVIVE_MARGIN_S`` more, have
passed since the run's last fault action and since the broker last failed to answer
during the drain (no master yet: it revives nothing before it has one): until then such
messages are hidden, in no count, and would be found missing at the end (the run
partial)."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from pyroaring import BitMap64

from mqlab import envelope
from mqlab.archive import layout
from mqlab.archive.records import UndrainedRecord, write_undrained
from mqlab.brokers.base import Driver, Remaining
from mqlab.run.context import RunContext
from mqlab.run.workers import Worker, command, totals
from mqlab.scenario.model import Scenario
from mqlab.workload.protocol import ReceiversStop

LOG = logging.getLogger(__name__)
UNDRAINED_RETRY_S = 90.0  # how long the end-of-run count waits for a broker to answer
DRAIN_CHECK_S = 0.5  # how often the broker is asked whether anything is left
REVIVE_MARGIN_S = 5.0  # past the redelivery timeout, for the broker to put them back


class Drain:
    """The drain phase as the measure loop steps it: started once every sender is done,
    ended (receivers told to stop) once the broker is empty or the deadline passed.
    ``last_fault()`` is when (``time.monotonic()``) the run's last fault action was done,
    None before any."""

    def __init__(self, ctx: RunContext, last_fault: Callable[[], float | None] = lambda: None):
        self.ctx = ctx
        self.last_fault = last_fault
        self.held_back = False  # "empty" was not trusted yet once (said in the manifest)
        self.unanswered: float | None = None  # when the broker last did not answer
        self.deadline: float | None = None
        self.started = 0.0
        self.next_check = 0.0
        self.empty_checks = 0
        self.stop_sent = False

    @property
    def begun(self) -> bool:
        return self.deadline is not None

    def step(self, now: float) -> None:
        ctx = self.ctx
        if self.deadline is None and all(x.done for x in ctx.senders):
            self.started = now
            self.deadline = now + drain_timeout_s(ctx.scenario, ctx.drivers[0])
            ctx.observer.phase(
                "drain: receivers stop once the broker holds nothing "
                f"(at most {self.deadline - now:.0f} s)"
            )
        if self.deadline is not None and not self.stop_sent and now >= self.next_check:
            self.next_check = now + DRAIN_CHECK_S
            answer = drained(ctx.drivers, ctx.receivers)
            if answer is None:
                self.unanswered = now
            empty = bool(answer) and self.settled(now)
            self.empty_checks = self.empty_checks + 1 if empty else 0
            ended_by = "broker empty" if self.empty_checks >= 2 else None
            if ended_by is None and now >= self.deadline:
                ended_by = "drain deadline"
            if ended_by is not None:
                seconds = round(now - self.started, 3)
                ctx.manifest.drain = {"ended_by": ended_by, "seconds": seconds}
                if self.held_back:
                    ctx.manifest.drain["held_for_cut_off_receives"] = True
                command(ctx.receivers, ReceiversStop())
                self.stop_sent = True

    def settled(self, now: float) -> bool:
        """Whether "empty" can be trusted now: always, but for a broker that hides what a
        cut-off receive took (``Driver.hides_cut_off_receives``) until its redelivery
        timeout and ``REVIVE_MARGIN_S`` have passed since the last fault action and since
        the broker last did not answer."""
        times = [t for t in (self.last_fault(), self.unanswered) if t is not None]
        last = max(times, default=None)
        hiding = [d for d in self.ctx.drivers if d.hides_cut_off_receives]
        if last is None or not hiding:
            return True
        until = last + max(d.redelivery_timeout_s for d in hiding) + REVIVE_MARGIN_S
        if now >= until:
            return True
        if not self.held_back:
            self.held_back = True
            self.ctx.observer.phase(
                "drain: messages that receives cut off by a fault took come back only "
                f"after the redelivery timeout: 'empty' trusted {until - now:.0f} s from now"
            )
        return False

    @property
    def over(self) -> bool:
        return self.deadline is not None and all(x.done for x in self.ctx.receivers)


def drain_timeout_s(s: Scenario, driver: Driver) -> float:
    if s.workload.drain_timeout_s > 0:
        return s.workload.drain_timeout_s
    return 2 * driver.redelivery_timeout_s + 10.0


def drained(drivers: Sequence[Driver], receivers: list[Worker]) -> bool | None:
    """The broker holds nothing for any of the run's queues, nothing is in flight; None
    when it did not answer (not drained: asked again)."""
    counted_in_flight = True
    for driver in drivers:
        try:
            rem = driver.remaining()
        except Exception as e:  # noqa: BLE001 - a failed check is not "drained"; try again
            LOG.debug("remaining() of %s: %s", driver.queue, e)
            return None
        if rem.count:
            return False
        counted_in_flight = counted_in_flight and rem.in_flight is not None
    if not counted_in_flight:  # the broker does not count unacked deliveries: ask receivers
        t = totals(receivers)
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


def check_undrained(
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
