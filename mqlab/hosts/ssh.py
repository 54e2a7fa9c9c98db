"""``SshHost``: a host reached over SSH with Fabric (EC2 nodes, netns lab hosts, your own
machines), and the port forwards through its connection."""

from __future__ import annotations

import contextlib
import io
import logging
import os
import shlex
import signal
import tarfile
import threading
import time
from pathlib import Path, PurePosixPath
from typing import Any

from mqlab.errors import FleetError
from mqlab.hosts.base import Attached, Host, Result
from mqlab.hosts.process import ProcessRecord

LOG = logging.getLogger(__name__)
CONNECT_TIMEOUT_S = 15.0


_STAT_SCRIPT = (
    'for p in "$@"; do if [ -r /proc/$p/stat ]; then '
    's=$(cat /proc/$p/stat 2>/dev/null); echo "$p ${s##*) }"; else echo "$p -"; fi; done'
)


def _parse_stats(text: str) -> dict[int, list[str]]:
    out: dict[int, list[str]] = {}
    for line in text.splitlines():
        pid, _, rest = line.partition(" ")
        if pid.isdigit() and rest and rest != "-":
            out[int(pid)] = rest.split()
    return out


class _SshAttached(Attached):
    def __init__(self, channel: Any):
        super().__init__()
        self.channel = channel
        self._stdin = channel.makefile_stdin("wb")
        threading.Thread(target=self._reader, args=(channel.makefile("rb"),), daemon=True).start()

    def send(self, line: str) -> bool:
        try:
            self._stdin.write(line.encode() + b"\n")
            self._stdin.flush()
            return True
        except (OSError, EOFError, ValueError):
            return False

    def close_stdin(self) -> None:
        with contextlib.suppress(OSError, EOFError, ValueError):
            self.channel.shutdown_write()

    def poll(self) -> int | None:
        if self.channel.exit_status_ready():
            return int(self.channel.recv_exit_status())
        if self.channel.closed or not self.channel.get_transport().is_active():
            return -1  # the connection is gone: the remote side reads EOF and ends
        return None

    def kill(self) -> None:
        with contextlib.suppress(Exception):
            self.channel.close()


class SshHost(Host):
    """A host reached with Fabric (Paramiko) as ``user`` with a private key."""

    def __init__(
        self,
        name: str,
        address: str,
        *,
        ssh_address: str | None = None,
        user: str = "root",
        port: int = 22,
        key: Path | None = None,
        known_hosts: Path | None = None,
        root: str,
    ):
        self.name = name
        self.address = address
        self.ssh_address = ssh_address or address
        self.user = user
        self.port = port
        self.key = key
        self.known_hosts = known_hosts
        self.root = PurePosixPath(root)
        self._conn: Any = None
        self._lock = threading.Lock()
        self._forwards: dict[tuple[str, int], _Forward] = {}

    # -- the connection -------------------------------------------------------------
    def connection(self) -> Any:
        with self._lock:
            if self._conn is not None and self._conn.is_connected:
                return self._conn
            import paramiko
            from fabric import Connection

            kwargs: dict[str, Any] = {
                "timeout": CONNECT_TIMEOUT_S,
                "banner_timeout": CONNECT_TIMEOUT_S,
                "auth_timeout": CONNECT_TIMEOUT_S,
                "allow_agent": False,
                "look_for_keys": False,
            }
            if self.key is not None:
                kwargs["key_filename"] = str(self.key)
            conn = Connection(
                self.ssh_address, user=self.user, port=self.port, connect_kwargs=kwargs
            )
            client = conn.client
            if self.known_hosts is not None:
                client.load_host_keys(str(self.known_hosts))
                client.set_missing_host_key_policy(paramiko.RejectPolicy())
            else:
                client.set_missing_host_key_policy(paramiko.AutoAddPolicy())
            try:
                conn.open()
            except Exception as e:  # noqa: BLE001 - any failure to connect is the user's to see
                raise FleetError(
                    f"{self.name}: cannot connect over SSH to {self.user}@{self.ssh_address}:"
                    f"{self.port} ({type(e).__name__}: {e})"
                ) from None
            conn.transport.set_keepalive(5)
            self._conn = conn
            return conn

    def forward(self, address: str, port: int) -> tuple[str, int]:
        """A loopback port here that reaches ``address:port`` from this host, through an
        SSH ``direct-tcpip`` channel per connection (how a coordinator outside a lab's
        private network reaches its brokers). Kept until ``close``."""
        with self._lock:
            fw = self._forwards.get((address, port))
            if fw is None:
                fw = self._forwards[(address, port)] = _Forward(self, address, port)
        return "127.0.0.1", fw.port

    def close(self) -> None:
        with self._lock:
            forwards, self._forwards = list(self._forwards.values()), {}
        for fw in forwards:
            fw.close()
        with self._lock:
            if self._conn is not None:
                with contextlib.suppress(Exception):
                    self._conn.close()
                self._conn = None

    @staticmethod
    def _command(
        cmd: list[str] | str, env: dict[str, str] | None, cwd: PurePosixPath | str | None = None
    ) -> str:
        text = cmd if isinstance(cmd, str) else shlex.join(cmd)
        if env:
            text = "env " + " ".join(shlex.quote(f"{k}={v}") for k, v in env.items()) + " " + text
        if cwd:
            text = f"cd {shlex.quote(str(cwd))} && {text}"
        return text

    def _exec(self, command: str, timeout_s: float, stdin: bytes | None = None) -> Result:
        transport = self.connection().transport
        try:
            chan = transport.open_session(timeout=CONNECT_TIMEOUT_S)
        except Exception as e:  # noqa: BLE001
            self.close()
            raise FleetError(f"{self.name}: SSH session failed ({e})") from None
        chan.settimeout(timeout_s)
        out, err = io.BytesIO(), io.BytesIO()
        try:
            chan.exec_command(command)
            if stdin is not None:
                chan.sendall(stdin)
            chan.shutdown_write()
            deadline = time.monotonic() + timeout_s
            while True:
                if chan.recv_ready():
                    out.write(chan.recv(65536))
                elif chan.recv_stderr_ready():
                    err.write(chan.recv_stderr(65536))
                elif chan.exit_status_ready():
                    break
                else:
                    if time.monotonic() > deadline:
                        raise FleetError(
                            f"{self.name}: {command!r} did not finish in {timeout_s:.0f} s"
                        )
                    time.sleep(0.002)
            while chan.recv_ready():
                out.write(chan.recv(65536))
            while chan.recv_stderr_ready():
                err.write(chan.recv_stderr(65536))
            rc = chan.recv_exit_status()
        except OSError as e:
            raise FleetError(f"{self.name}: SSH command failed ({e})") from None
        finally:
            chan.close()
        return Result(
            rc, out.getvalue().decode(errors="replace"), err.getvalue().decode(errors="replace")
        )

    # -- operations -----------------------------------------------------------------
    def run(self, cmd, *, timeout_s=60.0, env=None, check=True):
        res = self._exec(self._command(cmd, env), timeout_s)
        if check and res.rc != 0:
            raise FleetError(
                f"{self.name}: {cmd if isinstance(cmd, str) else shlex.join(cmd)!r} failed "
                f"({res.rc}): {(res.err or res.out).strip()[-400:]}"
            )
        return res

    def write_file(self, path, data, mode=0o644):
        p = shlex.quote(str(path))
        tmp = shlex.quote(f"{path}.tmp-{os.getpid()}")
        raw = data.encode() if isinstance(data, str) else data
        res = self._exec(
            f"mkdir -p $(dirname {p}) && cat > {tmp} && chmod {mode:o} {tmp} && mv -f {tmp} {p}",
            120,
            stdin=raw,
        )
        if res.rc != 0:
            raise FleetError(f"{self.name}: cannot write {path}: {res.err.strip()}")

    def put_file(self, local, remote):
        self.run(["mkdir", "-p", str(PurePosixPath(str(remote)).parent)])
        tmp = f"{remote}.part"
        try:
            self.connection().put(str(local), tmp)
        except Exception as e:  # noqa: BLE001
            raise FleetError(f"{self.name}: upload of {local} failed ({e})") from None
        self.run(["mv", "-f", tmp, str(remote)])

    def fetch_dir(self, remote, local):
        transport = self.connection().transport
        chan = transport.open_session(timeout=CONNECT_TIMEOUT_S)
        chan.settimeout(300)
        chan.exec_command(f"tar -C {shlex.quote(str(remote))} -cf - .")
        local.mkdir(parents=True, exist_ok=True)
        try:
            with chan.makefile("rb") as stream, tarfile.open(fileobj=stream, mode="r|") as tar:
                tar.extractall(local, filter="data")
            rc = chan.recv_exit_status()
        except (OSError, tarfile.TarError) as e:
            raise FleetError(f"{self.name}: fetching {remote} failed ({e})") from None
        finally:
            chan.close()
        if rc != 0:
            raise FleetError(f"{self.name}: fetching {remote} failed (tar exit {rc})")

    def spawn(self, cmd, log, *, env=None, cwd=None, user=None):
        inner = shlex.join(cmd)
        if user is not None:
            inner = f"setpriv --reuid={user[0]} --regid={user[1]} --clear-groups {inner}"
        if env:
            inner = (
                "env -i " + " ".join(shlex.quote(f"{k}={v}") for k, v in env.items()) + " " + inner
            )
        logq = shlex.quote(str(log))
        script = (
            f"mkdir -p $(dirname {logq}) && "
            + (f"cd {shlex.quote(str(cwd))} && " if cwd else "")
            + f"{{ setsid {inner} >>{logq} 2>&1 </dev/null & }}; p=$!; "
            'sleep 0.05; s=$(cat /proc/$p/stat 2>/dev/null); echo "$p ${s##*) }"'
        )
        res = self._exec(script, 60)
        stats = _parse_stats(res.out)
        if res.rc != 0 or not stats:
            raise FleetError(
                f"{self.name}: could not start {cmd[0]} ({res.err.strip() or res.out.strip()}); "
                f"see {log} on {self.name}"
            )
        pid, fields = next(iter(stats.items()))
        return ProcessRecord(pid, int(fields[2]), int(fields[19]), shlex.join(cmd))

    def attach(self, cmd, *, env=None, cwd=None, stderr=None):
        text = "exec " + self._command(cmd, env)
        if stderr is not None:
            e = shlex.quote(str(stderr))
            text = f"mkdir -p $(dirname {e}) && exec 2>>{e} && {text}"
        if cwd:
            text = f"cd {shlex.quote(str(cwd))} && {text}"
        transport = self.connection().transport
        chan = transport.open_session(timeout=CONNECT_TIMEOUT_S)
        chan.exec_command(text)
        return _SshAttached(chan)

    def alive(self, recs):
        if not recs:
            return []
        res = self._exec(
            f"sh -c {shlex.quote(_STAT_SCRIPT)} sh " + " ".join(str(r.pid) for r in recs), 30
        )
        stats = _parse_stats(res.out)
        return [
            r.pid in stats and stats[r.pid][0] != "Z" and int(stats[r.pid][19]) == r.start_ticks
            for r in recs
        ]

    def stop(self, rec, timeout_s=10.0, sig=signal.SIGTERM):
        if not self.is_alive(rec):
            self.run(f"kill -KILL -- -{rec.pgid} 2>/dev/null; true", check=False)
            return
        self.run(f"kill -{int(sig)} -- -{rec.pgid} 2>/dev/null; true", check=False)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and self.is_alive(rec):
            time.sleep(0.1)
        self.run(f"kill -KILL -- -{rec.pgid} 2>/dev/null; true", check=False)

    def children(self, rec):
        res = self.run(
            "for d in /proc/[0-9]*; do s=$(cat $d/stat 2>/dev/null) || continue; "
            'echo "${d#/proc/} ${s##*) }"; done',
            check=False,
        )
        return [
            ProcessRecord(pid, int(f[2]), int(f[19]), "child")
            for pid, f in _parse_stats(res.out).items()
            if int(f[1]) == rec.pid
        ]


class _Forward:
    """A listening loopback socket whose connections are tunnelled through ``host``'s SSH
    connection to ``address:port`` (what ``ssh -L`` does), each with two copy threads."""

    def __init__(self, host: SshHost, address: str, port: int):
        import socket

        self.host = host
        self.target = (address, port)
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.port = int(self.sock.getsockname()[1])
        self.closed = False
        self.open: list[Any] = []
        threading.Thread(
            target=self._accept, name=f"forward-{host.name}-{port}", daemon=True
        ).start()

    def _accept(self) -> None:
        while not self.closed:
            try:
                client, peer = self.sock.accept()
            except OSError:
                return
            try:
                chan = self.host.connection().transport.open_channel(
                    "direct-tcpip", self.target, peer, timeout=CONNECT_TIMEOUT_S
                )
            except Exception as e:  # noqa: BLE001 - the client sees a closed connection
                LOG.debug("%s: tunnel to %s:%s failed: %s", self.host.name, *self.target, e)
                client.close()
                continue
            self.open += [client, chan]
            for src, dst in ((client, chan), (chan, client)):
                threading.Thread(target=self._pump, args=(src, dst), daemon=True).start()

    @staticmethod
    def _pump(src: Any, dst: Any) -> None:
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                dst.sendall(data)
        except Exception:  # noqa: BLE001, S110 - either side went away: close both
            pass
        for end in (src, dst):
            with contextlib.suppress(Exception):
                end.close()

    def close(self) -> None:
        self.closed = True
        with contextlib.suppress(OSError):
            self.sock.close()
        for end in self.open:
            with contextlib.suppress(Exception):
                end.close()
        self.open = []
