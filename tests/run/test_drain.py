"""When the drain ends (mqlab/run/drain.py ``Drain``): "broker empty" after two empty
checks in a row, the deadline otherwise, and for a broker that hides what a cut-off
receive took (``hides_cut_off_receives``: RocketMQ) "empty" trusted only once its
redelivery timeout and ``REVIVE_MARGIN_S`` have passed since the last fault action. The
drivers and workers here are stand-ins with set answers; the clock is the test's. The
real case, a RocketMQ master killed mid-run, is ``tests/brokers/rocketmq/test_controller.py``.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from mqlab.brokers.base import Remaining
from mqlab.run import drain

TIMEOUT_S = 10.0


class Broker:
    """A driver as far as the drain asks it: ``remaining()`` and its redelivery timeout."""

    queue = "q"
    redelivery_timeout_s = TIMEOUT_S

    def __init__(
        self, hides: bool, count: int = 0, in_flight: int | None = None, silent_for: int = 0
    ):
        self.hides_cut_off_receives = hides
        self.count = count
        self.in_flight = in_flight
        self.silent_for = silent_for  # the first checks it does not answer (no master yet)

    def remaining(self, identify: bool = False) -> Remaining:
        if self.silent_for > 0:
            self.silent_for -= 1
            raise ConnectionError("no master")
        return Remaining(self.count, None, self.in_flight)


class Workers:
    """A worker as the drain counts it: done, and its totals."""

    def __init__(self, received: int = 0, acked: int = 0):
        self.done = True
        self.totals = {"received": received, "acked": acked}
        self.proc = SimpleNamespace(send=lambda text: None)

    def pump(self) -> None:
        pass


def context(broker: Broker, receivers: Workers | None = None) -> Any:
    phases: list[str] = []
    return SimpleNamespace(
        drivers=[broker],
        receivers=[receivers or Workers(100, 100)],
        senders=[Workers()],
        scenario=SimpleNamespace(workload=SimpleNamespace(drain_timeout_s=0.0)),
        manifest=SimpleNamespace(drain=None),
        observer=SimpleNamespace(phase=phases.append),
        phases=phases,
    )


def ended_at(d: drain.Drain, start: float, until: float) -> float | None:
    """Step ``d`` every check from ``start``; when it told the receivers to stop."""
    now = start
    while now <= until:
        d.step(now)
        if d.stop_sent:
            return now
        now += drain.DRAIN_CHECK_S
    return None


def test_a_broker_that_counts_everything_ends_at_the_second_empty_check() -> None:
    ctx = context(Broker(hides=False, in_flight=0))
    d = drain.Drain(ctx, lambda: 100.0)  # a fault right before: no matter
    assert ended_at(d, 100.0, 200.0) == 100.0 + drain.DRAIN_CHECK_S
    assert ctx.manifest.drain == {"ended_by": "broker empty", "seconds": drain.DRAIN_CHECK_S}


def test_a_hiding_broker_is_trusted_after_its_redelivery_timeout_past_the_last_fault() -> None:
    ctx = context(Broker(hides=True))
    fault = 97.0
    d = drain.Drain(ctx, lambda: fault)
    end = ended_at(d, 100.0, 200.0)
    trusted = fault + TIMEOUT_S + drain.REVIVE_MARGIN_S  # 112
    assert end == pytest.approx(trusted + drain.DRAIN_CHECK_S)  # its second empty check
    assert ctx.manifest.drain["ended_by"] == "broker empty"
    assert ctx.manifest.drain["held_for_cut_off_receives"] is True
    assert ctx.manifest.drain["seconds"] == pytest.approx(end - 100.0)
    assert len([p for p in ctx.phases if "redelivery timeout" in p]) == 1


def test_a_hiding_broker_with_no_fault_or_a_long_past_one_ends_at_once() -> None:
    for last in (None, 50.0):
        ctx = context(Broker(hides=True))
        d = drain.Drain(ctx, lambda last=last: last)
        assert ended_at(d, 100.0, 200.0) == 100.0 + drain.DRAIN_CHECK_S
        assert "held_for_cut_off_receives" not in ctx.manifest.drain


def test_a_hiding_broker_is_trusted_after_its_redelivery_timeout_past_its_last_silence() -> None:
    """A broker with no master yet when the drain begins (it revives nothing until it has
    one): the wait runs from its last unanswered check, later than the fault."""
    ctx = context(Broker(hides=True, silent_for=8))  # checks at 100.0 .. 103.5 unanswered
    d = drain.Drain(ctx, lambda: 95.0)
    end = ended_at(d, 100.0, 200.0)
    assert end == pytest.approx(103.5 + TIMEOUT_S + drain.REVIVE_MARGIN_S + drain.DRAIN_CHECK_S)
    assert ctx.manifest.drain["held_for_cut_off_receives"] is True
    # a broker that counts what is in flight ends at its second answer, silence or not
    ctx = context(Broker(hides=False, in_flight=0, silent_for=8))
    assert ended_at(drain.Drain(ctx, lambda: 95.0), 100.0, 200.0) == 104.5


def test_the_deadline_ends_a_drain_still_held_back() -> None:
    ctx = context(Broker(hides=True))
    d = drain.Drain(ctx, lambda: 1000.0)  # a fault action during the drain (a restart)
    deadline = 100.0 + 2 * TIMEOUT_S + 10.0
    end = ended_at(d, 100.0, 1000.0)
    assert end is not None and deadline <= end < deadline + drain.DRAIN_CHECK_S
    assert ctx.manifest.drain["ended_by"] == "drain deadline"
    assert ctx.manifest.drain["held_for_cut_off_receives"] is True


@pytest.mark.parametrize(
    ("broker", "receivers"),
    [
        (Broker(hides=True, count=3), Workers(100, 100)),  # ready messages left
        (Broker(hides=True), Workers(100, 97)),  # deliveries not acked (in flight unknown)
        (Broker(hides=False, count=2, in_flight=2), Workers(100, 100)),  # in flight
    ],
)
def test_what_is_left_keeps_the_drain_going_to_its_deadline(
    broker: Broker, receivers: Workers
) -> None:
    ctx = context(broker, receivers)
    d = drain.Drain(ctx)
    end = ended_at(d, 0.0, 100.0)
    assert end is not None and end >= 2 * TIMEOUT_S + 10.0
    assert ctx.manifest.drain["ended_by"] == "drain deadline"
