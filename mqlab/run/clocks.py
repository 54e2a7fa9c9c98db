"""Clocks of a run on hosts of their own: each client host's offset to the coordinator,
measured before and after the run (:mod:`mqlab.hosts.clocks`), the receivers'
corrections from it, and the manifest's ``clock`` section."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from typing import Any

from mqlab.errors import FleetError, MqlabError
from mqlab.hosts import clocks
from mqlab.hosts.base import Attached, Host
from mqlab.labs.placement import Placement
from mqlab.scenario.model import Scenario
from mqlab.workload.spec import processes

LOG = logging.getLogger(__name__)


def clock_info(target: str, budget_ms: float | None = None) -> dict[str, Any]:
    """The ``clock`` section a run starts with, as far as the coordinator knows it: on
    the local target every worker and broker reads one kernel clock (no offset, bound
    0); elsewhere nothing is claimed until the hosts' offsets are measured and
    :func:`section` replaces it."""
    if target == "local":
        return clocks.local_section("local", budget_ms)
    return clocks.unmeasured_section(budget_ms)


def measure(placement: Placement, phase: Callable[[str], None], when: str) -> dict[str, Any]:
    """Each client host's clock offset to the coordinator (empty for a local run)."""
    if not placement.remote:
        return {}
    phase(f"clocks: measuring each client host's offset ({when} the run)")
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


def section(
    s: Scenario,
    placement: Placement,
    before: dict[str, Any],
    after: dict[str, Any],
    senders: dict[str, str],
    receivers: dict[str, str],
) -> dict[str, Any]:
    """The manifest's ``clock`` section at the end of a run; ``senders``, ``receivers``:
    worker id -> host of the workers started (none: those the run would have started)."""
    if not placement.remote:
        return clocks.local_section(budget_ms=s.cluster.clock_budget_ms)
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


def corrections(
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
        p.first + t: placement.sender_host(p.node).name
        for p in processes(sender_processes, threads)
        for t in range(p.threads)
    }
    if receiver.name not in offsets or any(h not in offsets for h in sender_hosts.values()):
        return {}
    return clocks.corrections_us(offsets, sender_hosts, receiver.name)
