"""The wall clock of the worker path: every stamp compared across hosts reads it here.

End-to-end latency subtracts a send stamp taken on the sender's host from a receive
stamp taken on the receiver's host, so both are wall clock (``time.time_ns()``), and the
coordinator measures each host's offset (:mod:`mqlab.hosts.clocks`) to correct them.
Monotonic clocks (durations within one process) do not come through here.

!!! TESTS ONLY !!!  ``MQLAB_TEST_CLOCK_SKEW_MS`` (a float, in milliseconds; absent: 0)
is added to every wall-clock read of this process, read once at import. It exists so
that tests can run a worker or the clock responder on a host whose clock is "wrong" by
a known amount and check that the offset is measured and corrected. Never set it for a
real run: every figure of the run would be off by it, and nothing else says so (a
process with a non-zero skew logs one warning).
"""

from __future__ import annotations

import logging
import os
import time

LOG = logging.getLogger(__name__)
SKEW_ENV = "MQLAB_TEST_CLOCK_SKEW_MS"  # tests only


def _test_skew_ns() -> int:
    raw = os.environ.get(SKEW_ENV, "").strip()
    if not raw:
        return 0
    try:
        skew_ms = float(raw)
    except ValueError:
        raise ValueError(f"{SKEW_ENV}={raw!r}: not a number of milliseconds") from None
    LOG.warning("%s=%s: this process's wall clock is skewed on purpose (tests only)", SKEW_ENV, raw)
    return round(skew_ms * 1_000_000)


TEST_SKEW_NS = _test_skew_ns()  # 0 unless a test asked for a skewed clock


def wall_ns() -> int:
    """Wall clock, ns since the epoch (``time.time_ns()``, plus the test-only skew)."""
    return time.time_ns() + TEST_SKEW_NS


def wall_ms() -> int:
    """Wall clock, whole ms since the epoch (floor of :func:`wall_ns`)."""
    return wall_ns() // 1_000_000


def wall_s() -> float:
    """Wall clock, seconds since the epoch (``time.time()``, plus the test-only skew)."""
    return wall_ns() / 1e9
