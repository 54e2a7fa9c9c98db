"""The worker bundle's uv calls: from uv's cache first, the package index only if needed."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from mqlab.errors import FleetError
from mqlab.labs import bundle


def fake_uv(tmp_path: Path, offline_rc: int, online_rc: int) -> tuple[list[str], Path]:
    """A ``uv`` that appends its arguments to a log and exits with ``offline_rc`` when
    called with ``--offline``, else ``online_rc``."""
    log = tmp_path / "calls"
    script = tmp_path / "uv"
    script.write_text(
        "#!/bin/sh\n"
        f'echo "$*" >> {log}\n'
        'case " $* " in *" --offline "*) echo "offline: no cached setuptools" >&2; '
        f"exit {offline_rc};; esac\n"
        f'echo "index: unreachable" >&2; exit {online_rc}\n'
    )
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return [str(script)], log


def calls(log: Path) -> list[str]:
    return log.read_text().splitlines() if log.exists() else []


def test_a_cached_build_never_asks_the_index(tmp_path: Path) -> None:
    uv, log = fake_uv(tmp_path, offline_rc=0, online_rc=1)
    bundle._uv_run(uv, ["build", "--wheel", "x"], "uv build")
    assert calls(log) == ["--offline build --wheel x"]


def test_what_the_cache_lacks_comes_from_the_index(tmp_path: Path) -> None:
    uv, log = fake_uv(tmp_path, offline_rc=2, online_rc=0)
    bundle._uv_run(uv, ["pip", "install", "-r", "r.txt"], "uv pip install")
    assert calls(log) == ["--offline pip install -r r.txt", "pip install -r r.txt"]


def test_both_failing_names_the_step_and_the_index_error(tmp_path: Path) -> None:
    uv, log = fake_uv(tmp_path, offline_rc=2, online_rc=3)
    with pytest.raises(FleetError, match=r"worker bundle: uv build failed: index: unreachable"):
        bundle._uv_run(uv, ["build"], "uv build")
    assert len(calls(log)) == 2
