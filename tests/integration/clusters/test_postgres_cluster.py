"""The local PostgreSQL cluster: a primary, 2 quorum standbys, real replication, clean stop."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from mqlab.clusters import process
from mqlab.clusters.postgres import PostgresCluster, server_children
from mqlab.drivers.postgres import PostgresDriver, Settings
from mqlab.errors import DriverError

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PostgresCluster]:
    c = PostgresCluster(tmp_path_factory.mktemp("pg") / "cluster")
    c.start()
    try:
        yield c
    finally:
        c.stop()


def _conn(c: PostgresCluster, index: int) -> psycopg.Connection[object]:
    return psycopg.connect(
        host="127.0.0.1",
        port=c.ports["pg"][index],
        user="postgres",
        dbname="postgres",
        autocommit=True,
    )


def test_two_quorum_standbys(cluster: PostgresCluster) -> None:
    health = cluster.health()
    assert health["healthy"], health
    assert health["replication"] == {
        "s1": {"state": "streaming", "sync_state": "quorum"},
        "s2": {"state": "streaming", "sync_state": "quorum"},
    }
    with _conn(cluster, 0) as conn:
        assert conn.execute("SHOW synchronous_standby_names").fetchone() == ("ANY 1 (s1, s2)",)
        assert conn.execute("SHOW synchronous_commit").fetchone() == ("remote_write",)
        slots = conn.execute(
            "SELECT slot_name, active FROM pg_replication_slots ORDER BY 1"
        ).fetchall()
        assert slots == [("s1", True), ("s2", True)]
    for i in (1, 2):
        with _conn(cluster, i) as conn:
            assert conn.execute("SELECT pg_is_in_recovery()").fetchone() == (True,)
    versions = cluster.server_versions()
    assert len(versions) == 3 and all(v.startswith("PostgreSQL ") for v in versions)


def test_committed_row_is_on_a_standby(cluster: PostgresCluster) -> None:
    with _conn(cluster, 0) as conn:
        conn.execute("CREATE TABLE IF NOT EXISTS repl_probe (v text)")
        conn.execute("INSERT INTO repl_probe VALUES ('hello from the primary')")
    found: list[int] = []
    deadline = time.monotonic() + 20
    while not found and time.monotonic() < deadline:
        # remote_write: at least one standby received it; replay may take a moment
        for i in (1, 2):
            with _conn(cluster, i) as conn:
                exists = conn.execute("SELECT to_regclass('repl_probe') IS NOT NULL").fetchone()
                if exists == (True,) and conn.execute(
                    "SELECT count(*) FROM repl_probe WHERE v = 'hello from the primary'"
                ).fetchone() == (1,):
                    found.append(i)
        time.sleep(0.1)
    assert found


def test_send_fails_instead_of_hanging_without_standbys(tmp_path: Path) -> None:
    c = PostgresCluster(tmp_path / "cluster")
    c.start()
    try:
        driver = PostgresDriver(Settings(commit_timeout_s=1.0), c.endpoints(), "no_standbys")
        driver.setup()
        sender = driver.sender()
        sender.send([b"replicated"])
        c.kill_node(1)
        c.kill_node(2)
        with pytest.raises(DriverError, match="commit_timeout_s"):
            sender.send([b"stuck"])
        c.restart_node(1)  # one standby back: the quorum (ANY 1) confirms again
        deadline = time.monotonic() + 30
        while True:
            try:
                sender.send([b"after restart"])
                break
            except DriverError:
                if time.monotonic() > deadline:
                    raise
        sender.close()
        driver.teardown()
        driver.close()
    finally:
        c.stop()


def test_stop_leaves_no_process_behind(tmp_path: Path) -> None:
    c = PostgresCluster(tmp_path / "cluster")
    c.start()
    try:
        state = json.loads((tmp_path / "cluster" / "state.json").read_text())
        data_root = Path(state["extra"]["data_root"])
        assert data_root.is_dir()
        records = [process.ProcessRecord.from_json(r) for r in state["procs"].values()]
        assert len(records) == 3 and all(process.is_alive(r) for r in records)
        # each postmaster's helpers (checkpointer, walsender, walreceiver...)
        children = [ch for r in records for ch in server_children(r)]
        assert len(children) >= 3 * 3
    finally:
        PostgresCluster.load(tmp_path / "cluster").stop()  # as `mqlab cluster down` does
    assert not [r.pid for r in records + children if process.is_alive(r)]
    assert not data_root.exists()
    assert not (tmp_path / "cluster").exists()


def test_killed_node_takes_its_children_along(tmp_path: Path) -> None:
    c = PostgresCluster(tmp_path / "cluster")
    c.start()
    try:
        children = server_children(c.procs[0])
        assert children
        shmid = int(Path(str(c._data(0)), "postmaster.pid").read_text().splitlines()[6].split()[1])
        assert shmid in _shm_ids()
        c.kill_node(0)
        assert c.alive() == [False, True, True]
        assert not [r.pid for r in children if process.is_alive(r)]
        assert shmid not in _shm_ids()  # no SysV segment left behind by the crash
        c.restart_node(0)
        c._wait_healthy(time.monotonic() + 60, lambda _m: None)
    finally:
        c.stop()


def _shm_ids() -> set[int]:
    lines = Path("/proc/sysvipc/shm").read_text().splitlines()[1:]
    return {int(line.split()[1]) for line in lines}
