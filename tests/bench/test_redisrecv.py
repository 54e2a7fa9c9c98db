"""bench/redisrecv.c, the Redis receive path's native reference (issue 28), on the shared
real 3-node Redis cluster: it reads, acks and deletes exactly what the stream held, as
many times as it says, each entry once, and reads every entry's header."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from bench.clients import parse_redisrecv, redis_preload, redisrecv_binary
from tests.brokers.conftest import driver_on
from tests.conftest import SharedLab

pytestmark = pytest.mark.integration


@pytest.fixture
def driver(shared_lab: SharedLab) -> Iterator[Any]:
    with driver_on(shared_lab, "redis", "redisrecv") as d:
        yield d


@pytest.fixture(scope="module")
def exe(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return redisrecv_binary(tmp_path_factory.mktemp("redisrecv"))


def _run(exe: Path, driver: Any, connections: int, count: int, batch: int, seconds: float) -> str:
    node = next(n for n in driver.endpoints.nodes if n.extra.get("role") == "primary")
    cmd = [str(exe), node.host, str(node.port), driver.keys[0].decode(), driver.group]
    cmd += [str(connections), str(count), str(batch), str(seconds)]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=60, check=False)
    assert res.returncode == 0, res.stderr
    return res.stdout


def _pending(driver: Any) -> int:
    r = driver.connect()
    try:
        return int(r.xpending(driver.keys[0], driver.group)["pending"])
    finally:
        r.close()


def test_it_acks_and_deletes_every_entry_once_and_reads_each_header(exe: Path, driver: Any) -> None:
    """5,003 entries (batches of 10 and a last one of 3 per read of 64): all acked, the
    stream empty, nothing pending, the headers' seqs summed to 0 + 1 + ... + 5,002."""
    rows = 5_003
    redis_preload(driver, rows, 512)
    out = _run(exe, driver, 3, 64, 10, 30.0)
    acked, seconds = parse_redisrecv(out)
    assert acked == rows and seconds > 0
    assert out.split()[-1] == str(rows * (rows - 1) // 2)  # every entry's header read once
    assert driver.remaining().count == 0
    assert _pending(driver) == 0


def test_out_of_time_it_acks_what_it_read_and_leaves_the_rest(exe: Path, driver: Any) -> None:
    """With no time left after the first reads (1 ns), each of 2 connections reads one
    COUNT of 100 and acks it: 200 acked and deleted, the rest still in the stream, none
    pending."""
    redis_preload(driver, 1_000, 256)
    acked, _ = parse_redisrecv(_run(exe, driver, 2, 100, 10, 1e-9))
    assert acked == 200
    assert driver.remaining().count == 800
    assert _pending(driver) == 0
