"""Pure logic of the mongoeco stand-in's launcher (mqlab.brokers.mongodb.cluster): the search for a
Python >= 3.13, its one-line error, the pinned venv recipe and its cache. Starting the
real server is tests/brokers/mongodb/test_standin_cluster.py."""

from __future__ import annotations

import os
import stat
import sys
from pathlib import Path
from typing import Any

import pytest

from mqlab.brokers import tools
from mqlab.brokers.mongodb import cluster as standin
from mqlab.errors import ClusterError


def _fake_python(path: Path, version: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f'#!/bin/sh\necho "{version.replace(".", " ")} {path}"\n')
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def test_no_python_313_is_one_clear_line_naming_the_variable(tmp_path: Path) -> None:
    env = {"PATH": str(tmp_path / "bin"), "HOME": str(tmp_path)}
    _fake_python(tmp_path / "bin" / "python3.12", "3.12")
    with pytest.raises(ClusterError) as e:
        standin.find_python(env)
    msg = str(e.value)
    assert "\n" not in msg and "Python >= 3.13" in msg and standin.PYTHON_ENV in msg


def test_the_variable_is_used_alone_and_must_point_at_313_or_newer(tmp_path: Path) -> None:
    old = _fake_python(tmp_path / "old" / "python", "3.12")
    new = _fake_python(tmp_path / "new" / "python", "3.14")
    on_path = _fake_python(tmp_path / "bin" / "python3.13", "3.13")
    env = {"PATH": str(on_path.parent), "HOME": str(tmp_path)}
    assert standin.find_python({**env, standin.PYTHON_ENV: str(new)}) == (str(new), (3, 14))
    with pytest.raises(ClusterError, match=r"MQLAB_PYTHON313=.*Python 3\.12") as e:
        standin.find_python({**env, standin.PYTHON_ENV: str(old)})
    assert "\n" not in str(e.value)
    assert standin.find_python(env) == (str(on_path), (3, 13))


def test_pyenv_versions_are_found_when_not_on_path(tmp_path: Path) -> None:
    py = _fake_python(tmp_path / ".pyenv" / "versions" / "3.13.0" / "bin" / "python3.13", "3.13")
    env = {"PATH": str(tmp_path / "empty"), "HOME": str(tmp_path)}
    assert standin.candidate_pythons(env) == [str(py)]
    assert standin.find_python(env) == (str(py), (3, 13))


def test_python_version_of_this_interpreter() -> None:
    found = standin.python_version(sys.executable)
    assert found is not None and found[1] == sys.version_info[:2]
    assert standin.python_version("/nonexistent/python") is None


def test_venv_recipe_pins_mongoeco_and_never_fetches_an_interpreter(tmp_path: Path) -> None:
    assert f"mongoeco[wire]=={standin.MONGOECO_VERSION}" in standin.REQUIREMENTS
    assert all("==" in r for r in standin.REQUIREMENTS)
    venv = tmp_path / "v"
    with_uv = standin.install_commands("/py3.13", venv, "/bin/uv")
    assert with_uv[0] == ["/bin/uv", "venv", "--quiet", "--python", "/py3.13", str(venv)]
    assert with_uv[1][-len(standin.REQUIREMENTS) :] == list(standin.REQUIREMENTS)
    plain = standin.install_commands("/py3.13", venv, None)
    assert plain[0] == ["/py3.13", "-m", "venv", str(venv)]
    assert plain[1][:4] == [str(venv / "bin" / "python"), "-m", "pip", "install"]


def test_venv_dir_changes_with_interpreter_and_pins(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    a = standin.venv_dir(tmp_path, "/a/python3.13", (3, 13))
    assert a.parent == tmp_path
    assert a.name.startswith(f"mongoeco-{standin.MONGOECO_VERSION}-py3.13-")
    assert standin.venv_dir(tmp_path, "/b/python3.13", (3, 13)) != a
    monkeypatch.setattr(standin, "REQUIREMENTS", (*standin.REQUIREMENTS, "extra==1"))
    assert standin.venv_dir(tmp_path, "/a/python3.13", (3, 13)) != a


def test_cache_dir_choice(tmp_path: Path) -> None:
    assert tools.cache_dir({"MQLAB_CACHE_DIR": str(tmp_path / "c")}) == tmp_path / "c"
    assert tools.cache_dir({"XDG_CACHE_HOME": str(tmp_path / "x")}) == tmp_path / "x" / "mqlab"
    assert tools.cache_dir({"HOME": str(tmp_path)}) == tmp_path / ".cache" / "mqlab"


def test_a_made_venv_is_reused_without_installing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    py = _fake_python(tmp_path / "bin" / "python3.13", "3.13")
    env = {"PATH": str(py.parent), "HOME": str(tmp_path), "MQLAB_CACHE_DIR": str(tmp_path / "c")}
    venv = standin.venv_dir(tmp_path / "c", str(py), (3, 13))
    venv.mkdir(parents=True)
    (venv / "mqlab-ready.json").write_text("{}")

    def no_install(*_a: Any, **_k: Any) -> None:
        raise AssertionError("installed again")

    monkeypatch.setattr(standin.subprocess, "run", no_install)
    monkeypatch.setattr(standin, "find_python", lambda env: (str(py), (3, 13)))
    assert standin.ensure_venv(env=env) == venv / "bin" / "python"


def test_a_failed_install_is_one_line_and_leaves_no_half_venv(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    py = _fake_python(tmp_path / "bin" / "python3.13", "3.13")
    env = {
        "PATH": f"{py.parent}:{os.environ.get('PATH', '')}",
        "HOME": str(tmp_path),
        "MQLAB_CACHE_DIR": str(tmp_path / "c"),
    }
    monkeypatch.setattr(tools, "venv_bin", lambda name: None)  # venv + pip: the fake fails
    with pytest.raises(ClusterError) as e:
        standin.ensure_venv(env=env)
    assert "\n" not in str(e.value) and "PyPI" in str(e.value)
    assert not standin.venv_dir(tmp_path / "c", str(py), (3, 13)).exists()
