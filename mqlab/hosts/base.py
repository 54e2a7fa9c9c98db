"""Hosts: where broker nodes and workers run. One interface, two transports.

``LocalHost`` is this machine (subprocesses); ``SshHost`` is any host reached over SSH
with Fabric (EC2 nodes, netns lab hosts, your own machines). Everything mqlab does on a
host goes through these few operations, so local mode and the multi-host path are one
code path (locust's rule):

- ``run(cmd)``: a short command, its output;
- ``spawn(cmd, log)``: a detached server process in its own session, found again by
  PID + start ticks (``ProcessRecord``) for ``is_alive`` / ``stop``;
- ``attach(cmd)``: a process whose stdin/stdout stay connected to the coordinator
  (workers, the clock probe): when the coordinator or the SSH connection goes away,
  the process reads EOF and ends itself;
- ``write_file`` / ``put_file`` / ``fetch_dir``: files in and out.
"""

from __future__ import annotations

import logging
import shlex
import signal
import threading
import time
from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import IO

from mqlab.errors import FleetError
from mqlab.hosts.process import ProcessRecord

LOG = logging.getLogger(__name__)


@dataclass(frozen=True)
class Result:
    rc: int
    out: str
    err: str


class Attached(ABC):
    """A process connected to the coordinator by its stdin and stdout (line protocol)."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self._cv = threading.Condition()
        self._eof = False

    def _reader(self, stream: IO[bytes]) -> None:
        try:
            for raw in iter(stream.readline, b""):
                with self._cv:
                    self.lines.append(raw.decode(errors="replace").rstrip("\n"))
                    self._cv.notify_all()
        except (OSError, ValueError, EOFError) as e:
            LOG.debug("attached reader ended: %s", e)
        finally:
            with self._cv:
                self._eof = True
                self._cv.notify_all()

    def take(self) -> list[str]:
        """Lines received since the last call."""
        with self._cv:
            out, self.lines = self.lines, []
        return out

    def readline(self, timeout_s: float) -> str:
        """The next line; FleetError on EOF or timeout."""
        deadline = time.monotonic() + timeout_s
        with self._cv:
            while not self.lines:
                if self._eof:
                    raise FleetError("the remote process closed its output")
                left = deadline - time.monotonic()
                if left <= 0:
                    raise FleetError(f"no answer in {timeout_s:.0f} s")
                self._cv.wait(left)
            return self.lines.pop(0)

    @abstractmethod
    def send(self, line: str) -> bool:
        """Write one line to the process' stdin; False if it is gone."""

    @abstractmethod
    def close_stdin(self) -> None: ...

    @abstractmethod
    def poll(self) -> int | None:
        """Exit code once ended, else None. A lost connection ends with -1."""

    @abstractmethod
    def kill(self) -> None:
        """Drop the connection (remote) or kill the process (local)."""


class Host(ABC):
    """One machine. ``address`` is where the other hosts reach it."""

    name: str
    address: str
    root: PurePosixPath  # where mqlab keeps bundles, clusters and runs on this host
    is_local: bool = False

    @abstractmethod
    def run(
        self,
        cmd: list[str] | str,
        *,
        timeout_s: float = 60.0,
        env: dict[str, str] | None = None,
        check: bool = True,
    ) -> Result: ...

    @abstractmethod
    def write_file(
        self, path: PurePosixPath | str, data: bytes | str, mode: int = 0o644
    ) -> None: ...

    @abstractmethod
    def put_file(self, local: Path, remote: PurePosixPath | str) -> None: ...

    @abstractmethod
    def fetch_dir(self, remote: PurePosixPath | str, local: Path) -> None:
        """Copy the directory ``remote`` into ``local`` (created), keeping relative paths."""

    @abstractmethod
    def spawn(
        self,
        cmd: list[str],
        log: PurePosixPath | str,
        *,
        env: dict[str, str] | None = None,
        cwd: PurePosixPath | str | None = None,
        user: tuple[int, int] | None = None,
    ) -> ProcessRecord: ...

    @abstractmethod
    def attach(
        self,
        cmd: list[str],
        *,
        env: dict[str, str] | None = None,
        cwd: PurePosixPath | str | None = None,
        stderr: PurePosixPath | str | None = None,
    ) -> Attached: ...

    @abstractmethod
    def alive(self, recs: list[ProcessRecord]) -> list[bool]: ...

    def is_alive(self, rec: ProcessRecord) -> bool:
        return self.alive([rec])[0]

    @abstractmethod
    def stop(self, rec: ProcessRecord, timeout_s: float = 10.0, sig: int = signal.SIGTERM) -> None:
        """Signal the process group; SIGKILL it if still alive after ``timeout_s``."""

    @abstractmethod
    def children(self, rec: ProcessRecord) -> list[ProcessRecord]:
        """Live child processes of ``rec`` (servers whose children leave the group)."""

    def mkdir(self, path: PurePosixPath | str) -> None:
        self.run(["mkdir", "-p", str(path)])

    def remove_tree(self, path: PurePosixPath | str) -> None:
        self.run(["rm", "-rf", "--one-file-system", str(path)], check=False)

    def signal(self, rec: ProcessRecord, sig: int) -> None:
        """Send ``sig`` to the process group of ``rec`` if it still runs (pause, resume)."""
        if self.is_alive(rec):
            self.run(f"kill -{int(sig)} -- -{rec.pgid} 2>/dev/null; true", check=False)

    def own(self, path: PurePosixPath | str) -> None:
        """Record ``path``, made by mqlab on this host outside its root, in ``<root>/owned``:
        removing the lab (``mqlab lab down``) removes it even after mqlab crashed."""
        if self.is_local:
            return
        line = shlex.quote(str(path))
        self.run(f"mkdir -p {shlex.quote(str(self.root))} && echo {line} >> {self.root}/owned")

    def listening(self, ports: list[int]) -> list[bool]:
        """Whether something on this host listens on each TCP port (any address)."""
        res = self.run(["ss", "-Hltn"], check=False)
        bound = set()
        for line in res.out.splitlines():
            fields = line.split()
            if len(fields) >= 4:
                _addr, _, port = fields[3].rpartition(":")
                if port.isdigit():
                    bound.add(int(port))
        return [p in bound for p in ports]

    def forward(self, address: str, port: int) -> tuple[str, int]:
        """Where the coordinator connects to reach ``address:port`` as this host does:
        the address itself here, a loopback tunnel over SSH on ``SshHost``."""
        return address, port

    def close(self) -> None:  # noqa: B027 - optional
        """Drop connections."""
