"""``LocalHost``: this machine as a host (subprocesses in their own sessions)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
from pathlib import Path, PurePosixPath
from typing import Any

from mqlab.errors import FleetError
from mqlab.hosts import process
from mqlab.hosts.base import Attached, Host, Result


class _LocalAttached(Attached):
    def __init__(self, proc: subprocess.Popen[bytes]):
        super().__init__()
        self.proc = proc
        assert proc.stdout is not None
        threading.Thread(target=self._reader, args=(proc.stdout,), daemon=True).start()

    def send(self, line: str) -> bool:
        try:
            assert self.proc.stdin is not None
            self.proc.stdin.write(line.encode() + b"\n")
            self.proc.stdin.flush()
            return True
        except (OSError, ValueError):
            return False

    def close_stdin(self) -> None:
        with contextlib.suppress(OSError, ValueError):
            assert self.proc.stdin is not None
            self.proc.stdin.close()

    def poll(self) -> int | None:
        return self.proc.poll()

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()


class LocalHost(Host):
    is_local = True

    def __init__(self, name: str = "local", address: str = "127.0.0.1", root: Path | None = None):
        self.name = name
        self.address = address
        self.root = PurePosixPath(str(root or Path.cwd()))

    def run(self, cmd, *, timeout_s=60.0, env=None, check=True):
        try:
            out = subprocess.run(
                cmd,
                shell=isinstance(cmd, str),
                capture_output=True,
                text=True,
                timeout=timeout_s,
                env={**os.environ, **(env or {})},
                check=False,
            )
        except subprocess.TimeoutExpired:
            raise FleetError(f"{self.name}: {cmd!r} did not finish in {timeout_s:.0f} s") from None
        res = Result(out.returncode, out.stdout, out.stderr)
        if check and res.rc != 0:
            raise FleetError(f"{self.name}: {cmd!r} failed ({res.rc}): {res.err.strip()[-400:]}")
        return res

    def write_file(self, path, data, mode=0o644):
        p = Path(str(path))
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data.encode() if isinstance(data, str) else data)
        p.chmod(mode)

    def put_file(self, local, remote):
        import shutil

        Path(str(remote)).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(local, str(remote))

    def fetch_dir(self, remote, local):
        import shutil

        if Path(str(remote)).resolve() != local.resolve():
            shutil.copytree(str(remote), local, dirs_exist_ok=True)

    def spawn(self, cmd, log, *, env=None, cwd=None, user=None):
        _p, rec = process.spawn(
            cmd,
            Path(str(log)),
            env=env,
            cwd=Path(str(cwd)) if cwd else None,
            user=user[0] if user else None,
            group=user[1] if user else None,
        )
        return rec

    def attach(self, cmd, *, env=None, cwd=None, stderr=None):
        err: Any = subprocess.DEVNULL
        if stderr is not None:
            Path(str(stderr)).parent.mkdir(parents=True, exist_ok=True)
            err = open(str(stderr), "ab")  # noqa: SIM115 - handed to the child
        try:
            proc = subprocess.Popen(
                cmd,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=err,
                env={**os.environ, **(env or {})},
                cwd=str(cwd) if cwd else None,
                start_new_session=True,
            )
        finally:
            if stderr is not None:
                err.close()
        return _LocalAttached(proc)

    def alive(self, recs):
        return [process.is_alive(r) for r in recs]

    def stop(self, rec, timeout_s=10.0, sig=signal.SIGTERM):
        process.stop(rec, timeout_s=timeout_s, sig=sig)

    def signal(self, rec, sig):  # no shell: dash's kill takes no "--" before a process group
        if process.is_alive(rec):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(rec.pgid, sig)

    def children(self, rec):
        return process.children(rec)
