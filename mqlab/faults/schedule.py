"""A run's faults on its clock: each applied at its ``at_s`` by the module of its kind,
its second half (a restart, a resume, a heal) when it is due, and whatever is still in
place healed when the run ends, however it ends.

The kinds: :mod:`mqlab.faults.process` (kill, pause, crash, restart),
:mod:`mqlab.faults.partitions`, :mod:`mqlab.faults.link` (netem),
:mod:`mqlab.faults.powerloss`. A new kind is one module with ``ACTIONS``, ``check``,
``apply`` and ``heal``, one row per new action in the scenario's table
(:data:`mqlab.scenario.model.TAKES`: which fields it takes) and one name in the fault
log's vocabulary (:mod:`mqlab.archive.faultlog`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from mqlab.archive import faultlog as fl
from mqlab.errors import FleetError, MqlabError
from mqlab.faults import link, partitions, powerloss, process
from mqlab.faults.target import Target, Where
from mqlab.scenario.model import TAKES

LOG = logging.getLogger(__name__)


@dataclass(frozen=True)
class Kind:
    """One kind of fault: what is checked before the run, how it is applied."""

    check: Callable[[Any, Where], None]
    apply: Callable[[Any, Target], None]


MODULES = (process, partitions, link, powerloss)


def _kind(action: str) -> Kind:
    """The kind that carries out ``action``: a row of the scenario's table with no kind
    fails the import."""
    module = next((m for m in MODULES if action in m.ACTIONS), None)
    if module is None:
        raise ImportError(f"fault action {action!r} has no kind in mqlab.faults")
    return Kind(module.check, module.apply)


# every ``faults[].action`` a scenario may name (its table, TAKES), by its kind
KINDS: dict[str, Kind] = {action: _kind(action) for action in TAKES}
ACTIONS = tuple(KINDS)


def check(faults: Sequence[Any], where: Where) -> None:
    """Every fault of a scenario against where the run would strike, before anything
    starts: FleetError naming the first that cannot be carried out there."""
    for i, f in enumerate(faults):
        kind = KINDS.get(f.action)
        if kind is None:
            raise FleetError(
                f"faults[{i}].action = {f.action!r} is no fault mqlab knows "
                f"(one of {', '.join(ACTIONS)})"
            )
        kind.check(f, where)


def apply(f: Any, target: Target) -> None:
    KINDS[f.action].apply(f, target)


def heal(target: Target, key: int) -> None:
    """Heal what fault log entry ``key`` put in place (nothing if it is healed already);
    FleetError naming what is left if any is."""
    cut = target.cuts.get(key)
    if cut is None:
        return
    if isinstance(cut, powerloss.PowerCut):
        powerloss.heal(cut, key, target)
    elif isinstance(cut, link.LinkFault):
        link.heal(cut, key, target)
    else:
        partitions.heal(cut, key, target)


def heal_open(target: Target) -> None:
    """Heal everything still in place (the run ends early); errors are logged."""
    for key in sorted(target.cuts):
        try:
            heal(target, key)
        except MqlabError as e:
            LOG.error("%s", e)


def end(action: str, node: int, target: Target) -> None:
    """The second half of a fault: ``heal`` (``node`` is then the key in ``target.cuts``)
    or a process fault's (:func:`mqlab.faults.process.end`)."""
    if action == fl.HEAL:
        heal(target, node)
    else:
        process.end(action, node, target)


class Schedule:
    """The scenario's faults, applied as the run's clock reaches them."""

    def __init__(self, faults: Sequence[Any], target: Target):
        self.todo = sorted(faults, key=lambda f: f.at_s)
        self.target = target
        self.last_done: float | None = None  # time.monotonic() once the last one was done

    def due(self, elapsed_s: float) -> None:
        """Apply what is due ``elapsed_s`` after the senders started; end what is over."""
        while self.todo and elapsed_s >= self.todo[0].at_s:
            try:
                apply(self.todo.pop(0), self.target)
            finally:
                self.last_done = time.monotonic()
        pending = self.target.pending
        for p in list(pending):
            if elapsed_s >= p[0]:
                pending.remove(p)
                try:
                    end(p[1], p[2], self.target)
                finally:
                    self.last_done = time.monotonic()

    def finish(self) -> None:
        """The run completed: every second half still to come, now."""
        for _at, action, node in self.target.pending:
            end(action, node, self.target)

    def heal_open(self) -> None:
        heal_open(self.target)
