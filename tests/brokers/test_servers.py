"""Servers pinned in servers.toml, fetched from Maven Central and checked against the lock."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from mqlab.brokers import servers
from mqlab.errors import ClusterError


def test_every_pin_has_its_sha256s_recorded() -> None:
    lock = json.loads(servers.LOCK.read_text())
    for name, p in servers.pins().items():
        if p.go:  # a Go tool: its go.sum holds the hashes, the go command checks them
            assert p.gomod is not None
            module = p.go.split("/")[:3]
            gosum = (servers.CHECKOUT / p.gomod / "go.sum").read_text()
            assert f"{'/'.join(module)} {p.version} h1:" in gosum, name
            assert name not in lock, name
            continue
        assert lock[name]["version"] == p.version, name
        files = lock[name]["files"]
        assert files and all(len(h) == 64 for h in files.values()), name
        # the pinned artifacts themselves are among the recorded files
        for coord in p.deps:
            _g, a, v, *_ = coord.split(":")
            assert any(f.startswith(f"lib/{a}-{v}") for f in files), coord
        # where Maven Central serves each file (the images fetch them: nix/servers.nix)
        maven = lock[name]["maven"]
        assert sorted(maven) == sorted(files), name
        for rel, path in maven.items():
            assert path.endswith("/" + rel.split("/", 1)[1]) and not path.startswith("/"), rel
        for coord in p.deps:
            g, a, v, *_ = coord.split(":")
            want = f"{g.replace('.', '/')}/{a}/{v}/{a}-{v}.jar"
            assert want in maven.values(), coord


@pytest.fixture
def tiny(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A pin of one small jar with no dependencies, its lock and servers dir under tmp."""
    pins = tmp_path / "servers.toml"
    pins.write_text(
        '[tiny]\nversion = "1.16.0"\ndeps = ["commons-codec:commons-codec:{version}"]\n'
    )
    monkeypatch.setattr(servers, "PINS", pins)
    monkeypatch.setattr(servers, "LOCK", tmp_path / "servers.lock.json")
    monkeypatch.setenv("MQLAB_SERVERS_DIR", str(tmp_path / "servers"))
    return tmp_path


def test_not_fetched_names_the_command(tiny: Path) -> None:
    with pytest.raises(ClusterError, match=r"tiny 1.16.0 is not fetched: run scripts/bootstrap"):
        servers.home("tiny")


def test_fetch_refuses_without_recorded_hashes(tiny: Path) -> None:
    with pytest.raises(ClusterError, match=r"no sha256s recorded for tiny 1.16.0"):
        servers.fetch("tiny", log=lambda s: None)


@pytest.mark.integration
def test_fetch_checks_every_file_against_the_lock(tiny: Path) -> None:
    """Real Maven Central: lock records the jar's sha256; a fetch checks it; a changed
    record is refused and leaves no server behind. Maven's repository starts as a copy of
    the checkout's (scripts/bootstrap --test filled it): Maven's own plugins come from it
    instead of a minute of downloads, the pinned jar (in no server's closure) from Maven
    Central."""
    shared = servers.CHECKOUT / "build" / "servers" / "m2"
    assert shared.is_dir(), "run scripts/bootstrap --test first"
    assert not (shared / "commons-codec" / "commons-codec" / "1.16.0").exists()
    shutil.copytree(shared, tiny / "servers" / "m2", symlinks=True)
    d = servers.fetch("tiny", relock=True, log=lambda s: None)
    jar = d / "lib" / "commons-codec-1.16.0.jar"
    lock = json.loads(servers.LOCK.read_text())
    import hashlib

    assert lock["tiny"]["files"] == {
        "lib/commons-codec-1.16.0.jar": hashlib.sha256(jar.read_bytes()).hexdigest()
    }
    path = "commons-codec/commons-codec/1.16.0/commons-codec-1.16.0.jar"
    assert lock["tiny"]["maven"] == {"lib/commons-codec-1.16.0.jar": path}
    assert servers.classpath("tiny") == str(jar)
    # tamper with the record: the next fetch refuses and the server is not ready
    lock["tiny"]["files"]["lib/commons-codec-1.16.0.jar"] = "0" * 64
    servers.LOCK.write_text(json.dumps(lock))
    # a lock changed since the fetch: the fetched server is stale, not used
    with pytest.raises(ClusterError, match=r"tiny 1.16.0 is stale .*: run scripts/bootstrap"):
        servers.home("tiny")
    shutil.rmtree(d)
    with pytest.raises(ClusterError, match=r"differ from servers.lock.json"):
        servers.fetch("tiny", log=lambda s: None)
    with pytest.raises(ClusterError, match="is not fetched"):
        servers.home("tiny")


def test_java_17_is_found() -> None:
    assert servers.java(17).name == "java"
