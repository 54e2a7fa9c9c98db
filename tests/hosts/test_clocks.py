"""Clock offsets between hosts: the NTP-style estimator on synthetic exchanges (known
offsets, asymmetric paths, jitter), the responder in a real subprocess whose clock is
skewed on purpose, the manifest's clock section, and the receivers' corrections."""

from __future__ import annotations

import io
import os
import random
import subprocess
import sys
import time
from collections.abc import Callable

import pytest

from mqlab import clock
from mqlab.errors import FleetError
from mqlab.hosts import clocks
from mqlab.hosts.clocks import ClockEstimate

MS = 1_000_000  # ns


def synthetic(
    offset_ns: int, delays: Callable[[int], tuple[int, int, int]]
) -> tuple[Callable[[], tuple[int, int, int, int]], list[tuple[int, int, int, int]]]:
    """An exchange with a host whose clock runs ``offset_ns`` ahead; ``delays(i)`` gives
    round i's (coordinator -> host, host's processing, host -> coordinator) in ns. Also
    returns the list of rounds made."""
    now = 1_763_806_925 * 10**9
    made: list[tuple[int, int, int, int]] = []

    def exchange() -> tuple[int, int, int, int]:
        nonlocal now
        out, proc, back = delays(len(made))
        t0 = now
        t1 = t0 + out + offset_ns
        t2 = t1 + proc
        t3 = t0 + out + proc + back
        now = t3 + 1 * MS
        made.append((t0, t1, t2, t3))
        return t0, t1, t2, t3

    return exchange, made


# -- the estimator ------------------------------------------------------------------
def test_symmetric_paths_give_the_offset_exactly_and_the_bound_is_half_the_round_trip() -> None:
    exchange, _ = synthetic(37 * MS, lambda i: (2 * MS, MS // 10, 2 * MS))
    est = clocks.estimate(exchange, rounds=5)
    assert est.offset_ms == pytest.approx(37.0, abs=1e-9)
    assert est.rtt_ms == pytest.approx(4.0) and est.bound_ms == pytest.approx(est.rtt_ms / 2)
    assert est.rounds == 5
    exchange, _ = synthetic(-12_345_678, lambda i: (MS, 0, MS))  # a host behind
    assert clocks.estimate(exchange, 3).offset_ms == pytest.approx(-12.345678)


def test_an_asymmetric_path_errs_by_half_the_asymmetry_within_the_bound() -> None:
    # 9 ms out, 1 ms back: the estimate is off by (9 - 1) / 2 = 4 ms, the bound is 5 ms
    exchange, _ = synthetic(20 * MS, lambda i: (9 * MS, MS // 2, 1 * MS))
    est = clocks.estimate(exchange, rounds=4)
    assert est.offset_ms == pytest.approx(24.0)
    assert est.bound_ms == pytest.approx(5.0)
    assert abs(est.offset_ms - 20.0) <= est.bound_ms
    rng = random.Random(3)
    for _ in range(200):  # any split of any round trip: the truth is within the bound
        true = rng.randint(-500, 500) * MS
        exchange, _ = synthetic(
            true,
            lambda i: (rng.randint(0, 30 * MS), rng.randint(0, MS), rng.randint(0, 30 * MS)),
        )
        est = clocks.estimate(exchange, rounds=7)
        assert abs(est.offset_ms - true / MS) <= est.bound_ms + 1e-9


def test_the_sample_with_the_lowest_round_trip_is_kept() -> None:
    rng = random.Random(7)
    true = 3_250_000
    exchange, made = synthetic(
        true,
        lambda i: (
            (200_000, 50_000, 300_000)  # round 17: the quickest, asymmetric by 0.1 ms
            if i == 17
            else (
                rng.randint(400_000, 9 * MS),
                rng.randint(0, 2 * MS),
                rng.randint(400_000, 9 * MS),
            )
        ),
    )
    est = clocks.estimate(exchange, rounds=40)
    assert len(made) == 40
    # independently: the round with the least (t3 - t0) - (t2 - t1)
    t0, t1, t2, t3 = min(made, key=lambda r: (r[3] - r[0]) - (r[2] - r[1]))
    assert (t0, t1, t2, t3) == made[17]
    assert est.rtt_ms == pytest.approx(0.5)
    assert est.offset_ms == pytest.approx(((t1 - t0) + (t2 - t3)) / 2 / MS)
    assert est.offset_ms == pytest.approx(true / MS - 0.05)  # (0.2 - 0.3) / 2 ms off
    with pytest.raises(ValueError):
        clocks.estimate(exchange, rounds=0)


# -- the responder and the exchange over a pipe ---------------------------------------
def test_serve_says_ready_answers_pings_and_stops_at_bye() -> None:
    out = io.BytesIO()
    clocks.serve(io.BytesIO(b"ping\nping\nwhat\nbye\nping\n"), out)
    lines = out.getvalue().splitlines()
    assert lines[0] == b"ready"
    assert len(lines) == 4  # ready, two replies, one error; nothing after bye
    for line in lines[1:3]:
        t1, t2 = map(int, line.split())
        assert t1 <= t2 and abs(t1 - time.time_ns()) < 5_000 * MS
    assert lines[3].startswith(b"error")
    out = io.BytesIO()
    clocks.serve(io.BytesIO(b"ping\n"), out)  # EOF ends it too
    assert len(out.getvalue().splitlines()) == 2


def test_exchange_over_waits_for_ready_and_fails_on_eof_or_garbage() -> None:
    replies = iter([b"Welcome!\n", b"ready\n", b"5 6\n", b"nonsense\n"])
    written: list[bytes] = []
    exchange = clocks.exchange_over(written.append, lambda: next(replies, b""))
    t0, t1, t2, t3 = exchange()
    assert (t1, t2) == (5, 6) and t0 <= t3 and written == [b"ping\n"]
    with pytest.raises(FleetError, match="not 't1 t2'"):
        exchange()
    with pytest.raises(FleetError, match="during a ping"):
        exchange()
    with pytest.raises(FleetError, match="before it was ready"):
        clocks.exchange_over(written.append, lambda: b"")()
    with pytest.raises(FleetError, match="no 'ready'"):  # an endless stream of other lines
        clocks.exchange_over(written.append, lambda: b"\n")()


def _responder(skew_ms: str | None) -> subprocess.Popen[bytes]:
    env = dict(os.environ)
    env.pop(clock.SKEW_ENV, None)
    if skew_ms is not None:
        env[clock.SKEW_ENV] = skew_ms
    return subprocess.Popen(
        [sys.executable, "-m", "mqlab.hosts.clocks"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    )


def test_a_responder_with_a_skewed_clock_is_measured_within_1_ms() -> None:
    proc = _responder("37.5")
    assert proc.stdin is not None and proc.stdout is not None
    stdin = proc.stdin

    def write(data: bytes) -> None:
        stdin.write(data)
        stdin.flush()

    try:
        est = clocks.estimate(clocks.exchange_over(write, proc.stdout.readline), rounds=40)
        write(b"bye\n")
        _out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0
    assert est.offset_ms == pytest.approx(37.5, abs=1.0)
    assert 0 <= est.bound_ms < 1.0 and est.rounds == 40
    assert abs(est.offset_ms - 37.5) <= est.bound_ms + 0.01  # the truth is within the bound
    assert b"tests only" in err  # a skewed process says so


def test_measure_command_runs_the_responder_and_says_bye() -> None:
    env = {**os.environ, clock.SKEW_ENV: "-12.25"}
    est = clocks.measure_command([sys.executable, "-m", "mqlab.hosts.clocks"], 20, env)
    assert est.offset_ms == pytest.approx(-12.25, abs=1.0) and est.rounds == 20
    plain = {k: v for k, v in os.environ.items() if k != clock.SKEW_ENV}
    est = clocks.measure_command([sys.executable, "-m", "mqlab.hosts.clocks"], 10, plain)
    assert abs(est.offset_ms) < 1.0  # one kernel clock
    with pytest.raises(FleetError, match="clock offset not measured"):
        clocks.measure_command([sys.executable, "-c", "import sys; sys.exit(3)"], 5)


# -- the manifest's clock section -----------------------------------------------------
def est(offset: float, bound: float) -> ClockEstimate:
    return ClockEstimate(offset, bound, 2 * bound, 40)


def test_clock_section_bound_is_the_worst_pair_of_distinct_hosts() -> None:
    before = {"coord": est(0.0, 0.0), "a": est(1.0, 0.2), "b": est(-3.0, 0.5), "c": est(7.0, 0.1)}
    after = {"coord": est(0.0, 0.0), "a": est(1.3, 0.2), "b": est(-3.0, 0.4), "c": est(6.0, 0.1)}
    senders = {"sender-00": "a", "sender-01": "c"}
    receivers = {"receiver-00": "b", "receiver-01": "a"}
    sec = clocks.clock_section(before, after, senders, receivers, budget_ms=2.0)
    # independently: per host bound + |drift|; pairs (a,b) (a,a: one clock) (c,b) (c,a)
    worst = {"a": 0.2 + 0.3, "b": 0.5 + 0.0, "c": 0.1 + 1.0}
    pairs = [(s, r) for s in ("a", "c") for r in ("b", "a") if s != r]
    expected = max(worst[s] + worst[r] for s, r in pairs)
    assert expected == pytest.approx(1.6)  # c (drifted 1 ms) with b
    assert sec["bound_ms"] == pytest.approx(expected)
    assert sec["budget_ms"] == 2.0 and sec["within_budget"] is True
    assert sec["method"] == "ntp-style over ssh" and sec["note"] is None
    assert sec["hosts"]["a"] == {
        "before": {"offset_ms": 1.0, "bound_ms": 0.2, "rtt_ms": 0.4},
        "after": {"offset_ms": 1.3, "bound_ms": 0.2, "rtt_ms": 0.4},
        "drift_ms": pytest.approx(0.3),
    }
    assert set(sec["hosts"]) == {"coord", "a", "b", "c"}
    over = clocks.clock_section(before, after, senders, receivers, budget_ms=1.5)
    assert over["within_budget"] is False and over["bound_ms"] == sec["bound_ms"]


def test_clock_section_one_host_pairs_unmeasured_drift_and_missing_hosts() -> None:
    before = {"a": est(4.0, 0.3), "b": est(-1.0, 0.2)}
    same = clocks.clock_section(before, before, {"s": "a"}, {"r": "a"}, 1.0)
    assert same["bound_ms"] == 0.0 and same["within_budget"] is True  # one clock
    no_after = clocks.clock_section(before, None, {"s": "a"}, {"r": "b"}, 1.0)
    assert no_after["bound_ms"] == pytest.approx(0.5)  # drift unknown: counted as 0
    assert no_after["hosts"]["a"]["after"] is None and no_after["hosts"]["a"]["drift_ms"] is None
    assert "drift counts as 0" in no_after["note"]
    missing = clocks.clock_section(before, None, {"s": "a"}, {"r": "z"}, 1.0)
    assert missing["bound_ms"] is None and missing["within_budget"] is None
    assert "z" in missing["note"]


def test_local_and_unmeasured_sections() -> None:
    loc = clocks.local_section(budget_ms=5.0)
    assert loc["method"] == "one host" and loc["bound_ms"] == 0.0 and loc["within_budget"]
    assert loc["hosts"]["local"]["before"]["offset_ms"] == 0.0 and loc["budget_ms"] == 5.0
    none = clocks.unmeasured_section(5.0)
    assert none["bound_ms"] is None and none["hosts"] == {} and none["within_budget"] is None


# -- corrections ----------------------------------------------------------------------
def test_corrections_are_receiver_offset_minus_sender_offset_in_us() -> None:
    offsets = {"recv": 2.0, "fast": 50.0, "slow": -3.0004, "recv2": 2.0}
    corr = clocks.corrections_us(offsets, {0: "fast", 1: "slow", 2: "recv", 7: "fast"}, "recv")
    assert corr == {"0": -48_000, "1": 5_000, "2": 0, "7": -48_000}
    # a latency measured across the hosts, minus the correction, is the true latency
    true_us, send_true_us = 3_000, 10_000_000
    stamp = send_true_us + 50_000  # the fast sender's clock
    receipt = send_true_us + true_us + 2_000  # the receiver's clock
    assert (receipt - stamp) - corr["0"] == true_us


def test_the_test_skew_applies_to_every_wall_clock_read() -> None:
    code = (
        "import time; from mqlab import clock; "
        "print(clock.wall_ns() - time.time_ns(), clock.wall_ms() - time.time_ns() // 10**6, "
        "round(clock.wall_s() - time.time(), 3))"
    )
    env = {**os.environ, clock.SKEW_ENV: "37.5"}
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    )
    ns, ms, s = out.stdout.split()
    assert abs(int(ns) - 37_500_000) < 5 * MS
    assert abs(int(ms) - 37) <= 5 and abs(float(s) - 0.0375) < 0.005
    bad = subprocess.run(
        [sys.executable, "-c", "import mqlab.clock"],
        env={**os.environ, clock.SKEW_ENV: "soon"},
        capture_output=True,
        text=True,
    )
    assert bad.returncode != 0 and "not a number of milliseconds" in bad.stderr
    assert clock.TEST_SKEW_NS == 0 or os.environ.get(clock.SKEW_ENV)  # this process: none
