"""Clock offsets of the lab's hosts to the coordinator, measured NTP-style over a pipe.

End-to-end latency subtracts a send stamp (sender host's wall clock) from a receive stamp
(receiver host's wall clock), so it is only as good as the agreement of the two clocks.
Before a run (and again after it) the coordinator measures every host's offset:

- the remote half, ``python -m mqlab.hosts.clocks`` (run over ssh, or as a local
  subprocess), writes ``ready``, then answers each ``ping`` line with ``"t1 t2"``: its wall
  clock (:func:`mqlab.clock.wall_ns`) when the ping arrived and just before replying;
- the coordinator stamps t0 before writing the ping and t3 after reading the reply, with
  its own ``time.time_ns()``. Of ``rounds`` exchanges the one with the shortest round trip
  ``rtt = (t3 - t0) - (t2 - t1)`` is kept: ``offset = ((t1 - t0) + (t2 - t3)) / 2`` is the
  host's clock minus the coordinator's, and, whatever the split of the round trip between
  the two directions, the true offset lies within ``rtt / 2`` of it (``bound``).

Receivers subtract ``offset(receiver host) - offset(sender host)`` from each end-to-end
latency (:func:`corrections_us`), and the manifest's ``clock`` section
(:func:`clock_section`) states the worst error bound left on a corrected latency.

This module is pure apart from :func:`serve` and :func:`measure_command`: the estimator and
the section builders take their inputs as arguments, so tests drive them with synthetic
exchanges.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import IO, Any

from mqlab.clock import wall_ns
from mqlab.errors import FleetError

METHOD_NTP = "ntp-style over ssh"
METHOD_ONE_HOST = "one host"
METHOD_NOT_MEASURED = "not measured"
READY, PING, BYE = b"ready", b"ping", b"bye"
DEFAULT_ROUNDS = 40
MAX_LINES_BEFORE_READY = 100  # a login banner, say; more: not a clock responder

Exchange = Callable[[], tuple[int, int, int, int]]  # one round: (t0, t1, t2, t3) in ns


# -- the remote half ------------------------------------------------------------------
def serve(inp: IO[bytes], out: IO[bytes]) -> None:
    """Answer pings on ``inp`` with ``"t1 t2"`` on ``out`` until EOF or ``bye``.

    ``ready`` is the first line written. t1 = wall clock (ns) when the ping was read,
    t2 = just before the reply is written; both from :func:`mqlab.clock.wall_ns` (so a
    test can skew them with ``MQLAB_TEST_CLOCK_SKEW_MS``). Other lines get ``error ...``.
    """
    out.write(READY + b"\n")
    out.flush()
    while True:
        line = inp.readline()
        t1 = wall_ns()
        if not line:
            return
        word = line.strip()
        if word == BYE:
            return
        if word == PING:
            reply = b"%d %d\n" % (t1, wall_ns())
        else:
            reply = b"error unknown command " + word[:40] + b"\n"
        out.write(reply)
        out.flush()


# -- the coordinator's half -----------------------------------------------------------
def exchange_over(write: Callable[[bytes], None], readline: Callable[[], bytes]) -> Exchange:
    """One round trip per call over a running :func:`serve`: ``(t0, t1, t2, t3)``.

    t0 and t3 are the coordinator's ``time.time_ns()`` (never skewed) around writing the
    ping and reading the reply; t1 and t2 are the host's. ``write`` must deliver at once
    (flush). The first call first waits for the ``ready`` line (up to
    ``MAX_LINES_BEFORE_READY`` other lines before it, such as a login banner, are
    skipped). Raises :class:`FleetError` on EOF, no ``ready``, or a reply that is not
    two integers.
    """
    started = False

    def exchange() -> tuple[int, int, int, int]:
        nonlocal started
        if not started:
            for _ in range(MAX_LINES_BEFORE_READY + 1):
                line = readline()
                if not line:
                    raise FleetError("clock responder ended before it was ready")
                if line.strip() == READY:
                    break
            else:
                raise FleetError(
                    f"no 'ready' from the clock responder in {MAX_LINES_BEFORE_READY} lines"
                )
            started = True
        t0 = time.time_ns()
        write(PING + b"\n")
        line = readline()
        t3 = time.time_ns()
        if not line:
            raise FleetError("clock responder ended during a ping")
        try:
            t1_text, t2_text = line.split()
            return t0, int(t1_text), int(t2_text), t3
        except ValueError:
            raise FleetError(f"clock responder replied {line[:80]!r}, not 't1 t2'") from None

    return exchange


@dataclass(frozen=True)
class ClockEstimate:
    """A host's clock minus the coordinator's (``offset_ms``), within ``bound_ms`` (half
    the kept round trip, ``rtt_ms``), from the best of ``rounds`` exchanges."""

    offset_ms: float
    bound_ms: float
    rtt_ms: float
    rounds: int

    def to_json(self) -> dict[str, float]:
        return {
            "offset_ms": round(self.offset_ms, 3),
            "bound_ms": round(self.bound_ms, 3),
            "rtt_ms": round(self.rtt_ms, 3),
        }


def estimate(exchange: Exchange, rounds: int = DEFAULT_ROUNDS) -> ClockEstimate:
    """Run ``rounds`` exchanges and keep the one with the shortest round trip (the least
    room for asymmetric delays): offset = ((t1 - t0) + (t2 - t3)) / 2, bound = rtt / 2."""
    if rounds < 1:
        raise ValueError(f"rounds={rounds}: at least one exchange is needed")
    best: tuple[int, int] | None = None  # (rtt ns, 2 * offset ns)
    for _ in range(rounds):
        t0, t1, t2, t3 = exchange()
        rtt = (t3 - t0) - (t2 - t1)
        if best is None or rtt < best[0]:
            best = (rtt, (t1 - t0) + (t2 - t3))
    assert best is not None
    rtt_ns, twice_offset_ns = best
    return ClockEstimate(
        offset_ms=twice_offset_ns / 2 / 1e6,
        bound_ms=rtt_ns / 2 / 1e6,
        rtt_ms=rtt_ns / 1e6,
        rounds=rounds,
    )


def measure_command(
    argv: Sequence[str],
    rounds: int = DEFAULT_ROUNDS,
    env: Mapping[str, str] | None = None,
    timeout_s: float = 30.0,
) -> ClockEstimate:
    """Start ``argv`` (``ssh HOST python -m mqlab.hosts.clocks``, or the module itself for
    this host), estimate its clock over its stdin/stdout, then say ``bye``.

    A responder that never answers blocks the estimate: ssh's own keep-alives end it.
    """
    proc = subprocess.Popen(
        list(argv),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=dict(env) if env is not None else None,
    )
    assert proc.stdin is not None and proc.stdout is not None
    stdin, stdout = proc.stdin, proc.stdout

    def write(data: bytes) -> None:
        stdin.write(data)
        stdin.flush()

    try:
        est = estimate(exchange_over(write, stdout.readline), rounds)
        write(BYE + b"\n")
    except (FleetError, OSError) as err:
        proc.kill()
        _out, errs = proc.communicate(timeout=timeout_s)
        detail = errs.decode(errors="replace").strip().splitlines()[-1:] or [str(err)]
        raise FleetError(f"{' '.join(argv)}: clock offset not measured: {detail[0]}") from None
    try:
        proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
    return est


# -- what the manifest says -------------------------------------------------------------
def _host_entry(before: ClockEstimate | None, after: ClockEstimate | None) -> dict[str, Any]:
    drift = None
    if before is not None and after is not None:
        drift = round(abs(round(after.offset_ms, 3) - round(before.offset_ms, 3)), 3)
    return {
        "before": before.to_json() if before is not None else None,
        "after": after.to_json() if after is not None else None,
        "drift_ms": drift,
    }


def clock_section(
    before: Mapping[str, ClockEstimate],
    after: Mapping[str, ClockEstimate] | None,
    senders: Mapping[str, str],
    receivers: Mapping[str, str],
    budget_ms: float,
) -> dict[str, Any]:
    """The manifest's ``clock`` section of a run whose hosts' clocks were measured.

    ``before``/``after``: host -> estimate, measured before and after the run (``after``
    None: not measured again); ``senders``/``receivers``: worker id -> host.

    ``bound_ms`` is the worst error bound of a corrected end-to-end latency over every
    (sender host, receiver host) pair: the correction uses the offsets measured before the
    run, so a pair's bound is ``bound_s + bound_r + drift_s + drift_r``, where a host's
    drift is how far its offset moved by the end of the run (``|after - before|``). A
    host whose drift is unknown (no ``after`` estimate) counts a drift of 0: the bound
    then holds only for the start of the run, and ``note`` says so. A pair on one host
    reads one clock: its bound is 0. A worker host without a ``before`` estimate makes
    the bound unknown (null, ``within_budget`` null, ``note`` names the hosts).
    """
    hosts = sorted({*before, *(after or {}), *senders.values(), *receivers.values()})
    entries = {h: _host_entry(before.get(h), (after or {}).get(h)) for h in hosts}
    missing = sorted(h for h in {*senders.values(), *receivers.values()} if h not in before)
    notes = []
    bound: float | None = 0.0
    if missing:
        bound = None
        notes.append(f"not measured on {', '.join(missing)}: the error bound is unknown")
    else:

        def worst(h: str) -> float:
            e = entries[h]
            return float(e["before"]["bound_ms"]) + float(e["drift_ms"] or 0.0)

        for s in sorted(set(senders.values())):
            for r in sorted(set(receivers.values())):
                if s != r:
                    bound = max(bound or 0.0, worst(s) + worst(r))
        bound = round(bound or 0.0, 3)
        undrifted = [h for h in hosts if entries[h]["drift_ms"] is None]
        if undrifted:
            notes.append(
                f"not measured again after the run on {', '.join(undrifted)}: their drift "
                "counts as 0, so the bound holds at the start of the run"
            )
    return {
        "method": METHOD_NTP,
        "wall_clock": "time.time_ns",
        "hosts": entries,
        "bound_ms": bound,
        "budget_ms": float(budget_ms),
        "within_budget": None if bound is None else bound <= budget_ms,
        "note": "; ".join(notes) or None,
    }


def local_section(host: str = "local", budget_ms: float | None = None) -> dict[str, Any]:
    """The ``clock`` section of a run on one host: every worker and broker reads one
    kernel clock, so there is no offset and no error bound."""
    zero = ClockEstimate(0.0, 0.0, 0.0, 0)
    return {
        "method": METHOD_ONE_HOST,
        "wall_clock": "time.time_ns",
        "hosts": {host: {"before": zero.to_json(), "after": zero.to_json(), "drift_ms": 0.0}},
        "bound_ms": 0.0,
        "budget_ms": None if budget_ms is None else float(budget_ms),
        "within_budget": True,
        "note": "one host: every worker and broker reads the same kernel clock",
    }


def unmeasured_section(budget_ms: float | None = None) -> dict[str, Any]:
    """The ``clock`` section of a run on several hosts whose offsets were not measured."""
    return {
        "method": METHOD_NOT_MEASURED,
        "wall_clock": "time.time_ns",
        "hosts": {},
        "bound_ms": None,
        "budget_ms": None if budget_ms is None else float(budget_ms),
        "within_budget": None,
        "note": "clock offsets between hosts were not measured",
    }


def corrections_us(
    offsets_ms: Mapping[str, float], sender_hosts: Mapping[int, str], receiver_host: str
) -> dict[str, int]:
    """For a receiver on ``receiver_host``: sender id (as a string) -> µs to subtract from
    that sender's end-to-end latencies, ``round((offset_receiver - offset_sender) * 1000)``
    (the receive stamp runs ahead by the receiver's offset, the send stamp by the
    sender's). ``sender_hosts``: sender id -> host; ``offsets_ms``: host -> offset."""
    off_r = offsets_ms[receiver_host]
    return {
        str(sid): round((off_r - offsets_ms[host]) * 1000)
        for sid, host in sorted(sender_hosts.items())
    }


if __name__ == "__main__":
    serve(sys.stdin.buffer, sys.stdout.buffer)
