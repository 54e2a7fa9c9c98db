"""Servers fetched from Maven Central at set-up, never at run time (stdlib only).

``servers.toml`` (beside this file) pins each server: its version, the Maven
coordinates whose runtime closure makes its class path (``deps``, copied into
``lib/``) and/or one distribution archive (``dist``, unpacked into ``dist/``).
``servers.lock.json`` records the sha256 of every file fetched for that version, and
where Maven Central serves it (``maven``: its path under the repository's root, for the
images, which fetch the same files: nix/servers.nix); ``fetch`` checks each one and
refuses a file that is not recorded or differs.
A Go tool (``go``: its main package; ``gomod``: the checkout's folder whose ``go.mod``
names its version and whose ``go.sum`` holds every module's hash, which the go
command checks) is built from the Go module proxy into ``bin/``. A pin marked
``bench = true`` is a benchmark's reference tool: fetched with ``--bench`` only.

Where they go: ``$MQLAB_SERVERS_DIR``, else ``build/servers`` of this checkout;
Maven's own repository for the downloads is ``<that>/m2`` (never ``~/.m2``);
``$MQLAB_MAVEN_SETTINGS`` names a settings file for mvn (a mirror of Maven Central, say).
A server is ready when ``<dir>/<name>-<version>/.verified`` holds the digest of what
it was checked against (its pin and its lock entry, or its go.mod and go.sum): a pin or
lock changed since then makes it stale, and ``fetch`` fetches it again.

    python -m mqlab.brokers.servers fetch [--bench] [NAME ...]   # scripts/bootstrap --test
                                                        # (--bench: scripts/bootstrap --bench)
    python -m mqlab.brokers.servers lock NAME ...      # re-resolve, record the sha256s
    python -m mqlab.brokers.servers path NAME          # the server's directory
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import tomllib
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from mqlab.errors import ClusterError

PINS = Path(__file__).with_name("servers.toml")
LOCK = Path(__file__).with_name("servers.lock.json")
#: maven-dependency-plugin, pinned (known to work with the machine's Maven 3.8.7)
DEPENDENCY_PLUGIN = "org.apache.maven.plugins:maven-dependency-plugin:3.8.1"
FETCH = "scripts/bootstrap --test (or: python -m mqlab.brokers.servers fetch {name})"
FETCH_BENCH = "scripts/bootstrap --bench (or: python -m mqlab.brokers.servers fetch {name})"
CHECKOUT = Path(__file__).resolve().parents[2]
#: one mvn call (the largest closure, Pulsar's, takes about a minute here): a stalled
#: download fails with a line saying so instead of hanging set-up or a test
MVN_TIMEOUT_S = 900


@dataclass(frozen=True)
class Pin:
    name: str
    version: str
    deps: tuple[str, ...]  # group:artifact:version[:type[:classifier]]
    dist: str | None  # group:artifact:version:type[:classifier]
    java: int  # the Java major version it runs on
    go: str | None = None  # a Go main package, built into bin/
    gomod: str | None = None  # the checkout's folder of its go.mod and go.sum
    bench: bool = False  # a benchmark's reference tool (fetched by --bench only)
    # group:artifact:version of POMs whose dependencyManagement is imported, so that the
    # closure gets the versions the project builds its own distribution with
    boms: tuple[str, ...] = ()


def pins(path: Path | None = None) -> dict[str, Pin]:
    with (path or PINS).open("rb") as f:
        raw = tomllib.load(f)
    out = {}
    for name, t in raw.items():
        version = str(t["version"])
        deps = [str(d).replace("{version}", version) for d in t.get("deps", ())]
        dist = str(t["dist"]).replace("{version}", version) if t.get("dist") else None
        out[name] = Pin(
            name,
            version,
            tuple(deps),
            dist,
            int(t.get("java", 17)),
            str(t["go"]) if t.get("go") else None,
            str(t["gomod"]) if t.get("gomod") else None,
            bool(t.get("bench", False)),
            tuple(str(b).replace("{version}", version) for b in t.get("boms", ())),
        )
    return out


def pin(name: str) -> Pin:
    try:
        return pins()[name]
    except KeyError:
        raise ClusterError(f"{PINS}: no server {name!r} pinned") from None


def root(env: dict[str, str] | None = None) -> Path:
    env = dict(os.environ) if env is None else env
    if env.get("MQLAB_SERVERS_DIR"):
        return Path(env["MQLAB_SERVERS_DIR"]).expanduser().resolve()
    return CHECKOUT / "build" / "servers"


def digest(p: Pin) -> str:
    """What a fetched server was checked against: its pin, and its lock entry (a Go
    tool: its go.mod and go.sum)."""
    h = hashlib.sha256(repr((p.version, p.deps, p.dist, p.go, p.boms)).encode())
    if p.go and p.gomod:
        for f in ("go.mod", "go.sum"):
            h.update((CHECKOUT / p.gomod / f).read_bytes())
    else:
        h.update(json.dumps(_read_lock().get(p.name, {}), sort_keys=True).encode())
    return h.hexdigest()


def _verified(d: Path, p: Pin) -> bool:
    try:
        return bool(json.loads((d / ".verified").read_text()).get("digest") == digest(p))
    except (OSError, ValueError):
        return False


def home(name: str) -> Path:
    """The fetched and checked server's directory (``lib/``, ``dist/``)."""
    p = pin(name)
    d = root() / f"{name}-{p.version}"
    if not _verified(d, p):
        how = (FETCH_BENCH if p.bench else FETCH).format(name=name)
        state = "is stale (its pin or lock changed)" if d.exists() else "is not fetched"
        raise ClusterError(f"{name} {p.version} {state}: run {how}")
    return d


def tool(name: str) -> Path:
    """A built Go tool's binary (``bin/`` holds one)."""
    [binary] = sorted((home(name) / "bin").iterdir())
    return binary


def classpath(name: str) -> str:
    """Every jar of the server's ``lib/``, sorted, joined for ``-cp``."""
    return ":".join(str(j) for j in sorted((home(name) / "lib").glob("*.jar")))


def dist(name: str) -> Path:
    """The unpacked distribution's top folder (e.g. ``apache-artemis-2.40.0``)."""
    d = home(name) / "dist"
    tops = [p for p in d.iterdir() if p.is_dir()] if d.is_dir() else []
    if len(tops) != 1:
        raise ClusterError(f"{d}: expected one unpacked distribution folder, found {len(tops)}")
    return tops[0]


def java(major: int = 17) -> Path:
    """The ``java`` of that major version: ``$MQLAB_JAVA_<major>`` or the Debian/Temurin JDK."""
    env = os.environ.get(f"MQLAB_JAVA_{major}")
    candidates = [Path(env)] if env else []
    candidates += sorted(Path("/usr/lib/jvm").glob(f"*-{major}-*/bin/java"))
    candidates += sorted(Path("/usr/lib/jvm").glob(f"*{major}*/bin/java"))
    for c in candidates:
        if c.is_file() and os.access(c, os.X_OK):
            return c
    raise ClusterError(f"Java {major} not found under /usr/lib/jvm (set MQLAB_JAVA_{major})")


def version(name: str) -> str:
    return pin(name).version


# ---------------------------------------------------------------- fetching


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _pom(p: Pin) -> str:
    deps = []
    for coord in p.deps:
        g, a, v, *rest = coord.split(":")
        typ = f"<type>{rest[0]}</type>" if rest else ""
        cls = f"<classifier>{rest[1]}</classifier>" if len(rest) > 1 else ""
        deps.append(
            f"<dependency><groupId>{g}</groupId><artifactId>{a}</artifactId>"
            f"<version>{v}</version>{typ}{cls}</dependency>"
        )
    boms = []
    for coord in p.boms:
        g, a, v = coord.split(":")
        boms.append(
            f"<dependency><groupId>{g}</groupId><artifactId>{a}</artifactId>"
            f"<version>{v}</version><type>pom</type><scope>import</scope></dependency>"
        )
    managed = (
        f"<dependencyManagement><dependencies>{''.join(boms)}</dependencies></dependencyManagement>"
        if boms
        else ""
    )
    return (
        '<project xmlns="http://maven.apache.org/POM/4.0.0"><modelVersion>4.0.0</modelVersion>'
        f"<groupId>mqlab.fetch</groupId><artifactId>{p.name}</artifactId>"
        f"<version>{p.version}</version><packaging>pom</packaging>{managed}"
        f"<dependencies>{''.join(deps)}</dependencies></project>"
    )


def _mvn(args: list[str], cwd: Path, m2: Path) -> None:
    mvn = shutil.which("mvn")
    if mvn is None:
        raise ClusterError("mvn not found (install Debian's maven: apt-get install maven)")
    cmd = [mvn, "-q", "-B", f"-Dmaven.repo.local={m2}", *args]
    settings = os.environ.get("MQLAB_MAVEN_SETTINGS")
    if settings:  # a mirror of Maven Central, say: mvn's own settings file
        if not Path(settings).is_file():
            raise ClusterError(f"MQLAB_MAVEN_SETTINGS: {settings} is not a file (unset it)")
        cmd[1:1] = ["-s", settings]
    try:
        r = subprocess.run(
            cmd, cwd=cwd, capture_output=True, text=True, check=False, timeout=MVN_TIMEOUT_S
        )
    except subprocess.TimeoutExpired as e:
        raise ClusterError(
            f"mvn did not finish in {MVN_TIMEOUT_S} s (is Maven Central reachable?): "
            + " ".join(cmd)
        ) from e
    if r.returncode != 0:
        tail = (r.stdout + r.stderr).strip().splitlines()[-15:]
        raise ClusterError(f"mvn failed: {' '.join(cmd)}\n" + "\n".join(tail))


def _download(p: Pin, into: Path, m2: Path) -> None:
    """Fetch ``p``'s files into ``into/lib`` and ``into/dist`` (not yet checked)."""
    if p.deps:
        work = into / ".pom"
        work.mkdir(parents=True, exist_ok=True)
        (work / "pom.xml").write_text(_pom(p))
        _mvn(
            [
                f"{DEPENDENCY_PLUGIN}:copy-dependencies",
                "-DincludeScope=runtime",
                f"-DoutputDirectory={into / 'lib'}",
            ],
            work,
            m2,
        )
        shutil.rmtree(work)
    if p.dist:
        g, a, v, typ, *cls = p.dist.split(":")
        (into / "archive").mkdir(parents=True, exist_ok=True)
        artifact = ":".join([g, a, v, typ, *cls])
        _mvn(
            [
                f"{DEPENDENCY_PLUGIN}:copy",
                f"-Dartifact={artifact}",
                f"-DoutputDirectory={into / 'archive'}",
            ],
            into,
            m2,
        )


def _go_build(p: Pin, into: Path, base: Path) -> None:
    """Build ``p.go`` with the go.mod / go.sum of ``p.gomod``: the go command fetches each
    module from the proxy and checks it against go.sum (``-mod=readonly``: nothing added)."""
    assert p.go and p.gomod
    go = shutil.which("go")
    if go is None:
        raise ClusterError(f"go not found: building {p.name} needs the Go toolchain")
    src = CHECKOUT / p.gomod
    gomod = (src / "go.mod").read_text()
    if f"{p.go.split('/')[0]}" not in gomod or f" {p.version}" not in gomod:
        raise ClusterError(f"{src / 'go.mod'}: does not require version {p.version} of {p.name}")
    work = into / ".go"
    work.mkdir(parents=True)
    for f in ("go.mod", "go.sum"):
        shutil.copy(src / f, work / f)
    env = {
        **os.environ,
        "GOPATH": str(base / "go"),
        "GOMODCACHE": str(base / "go" / "mod"),
        "GOCACHE": str(base / "go" / "cache"),
        "GOFLAGS": "-buildvcs=false -mod=readonly",
        "GOTOOLCHAIN": "local",
    }
    out = into / "bin" / p.go.rstrip("/").rsplit("/", 1)[-1]
    cmd = [go, "build", "-trimpath", "-o", str(out), p.go]
    r = subprocess.run(cmd, cwd=work, env=env, capture_output=True, text=True, check=False)
    if r.returncode != 0:
        tail = (r.stdout + r.stderr).strip().splitlines()[-10:]
        raise ClusterError(f"go build failed: {' '.join(cmd)}\n" + "\n".join(tail))
    shutil.rmtree(work)


def _files(d: Path) -> dict[str, Path]:
    out = {}
    for sub in ("lib", "archive"):
        for f in sorted((d / sub).glob("*")) if (d / sub).is_dir() else ():
            out[f"{sub}/{f.name}"] = f
    return out


def _unpack(d: Path) -> None:
    archives = sorted((d / "archive").glob("*")) if (d / "archive").is_dir() else []
    for a in archives:
        target = d / "dist"
        target.mkdir(exist_ok=True)
        if a.name.endswith((".tar.gz", ".tgz")):
            with tarfile.open(a) as t:
                t.extractall(target, filter="tar")  # keeps execute bits, refuses escapes
        elif a.name.endswith(".zip"):
            with zipfile.ZipFile(a) as z:
                z.extractall(target)


def _maven_paths(got: dict[str, str], m2: Path) -> dict[str, str]:
    """Each fetched file's path in Maven's repository (``m2``), which is its path under
    Maven Central's root: the file of the same name and sha256 there."""
    by_name: dict[str, list[Path]] = {}
    for f in m2.rglob("*"):
        if f.suffix in (".jar", ".gz", ".zip", ".tgz") and f.is_file():
            by_name.setdefault(f.name, []).append(f)
    out = {}
    for rel, sha in got.items():
        found = [f for f in by_name.get(rel.split("/", 1)[1], []) if _sha256(f) == sha]
        if not found:
            raise ClusterError(f"{rel}: not in Maven's repository {m2} with sha256 {sha}")
        out[rel] = found[0].relative_to(m2).as_posix()
    return out


def _read_lock() -> dict[str, dict[str, object]]:
    return json.loads(LOCK.read_text()) if LOCK.is_file() else {}


def fetch(name: str, *, relock: bool = False, log: Callable[[str], object] = print) -> Path:
    """Download, check against the lock (or record it, ``relock``) and unpack one server."""
    p = pin(name)
    base = root()
    final = base / f"{name}-{p.version}"
    if _verified(final, p) and not relock:
        return final
    base.mkdir(parents=True, exist_ok=True)
    lock = _read_lock()
    entry = lock.get(name, {})
    want: dict[str, str] = dict(entry.get("files", {})) if entry.get("version") == p.version else {}  # type: ignore[call-overload]
    if not want and not relock and not p.go:
        raise ClusterError(
            f"{LOCK}: no sha256s recorded for {name} {p.version} "
            f"(record them once: python -m mqlab.brokers.servers lock {name})"
        )
    where = "the Go module proxy" if p.go else "Maven Central"
    log(f"servers: fetching {name} {p.version} from {where}")
    with tempfile.TemporaryDirectory(prefix=f".{name}-", dir=base) as tmp:
        work = Path(tmp)
        if p.go:
            _go_build(p, work, base)
        _download(p, work, base / "m2")
        got = {rel: _sha256(f) for rel, f in _files(work).items()}
        if p.go:
            pass  # the go command checked every module against go.sum
        elif relock:
            lock[name] = {
                "version": p.version,
                "files": dict(sorted(got.items())),
                "maven": _maven_paths(got, base / "m2"),
            }
            LOCK.write_text(json.dumps(lock, indent=1, sort_keys=True) + "\n")
            log(f"servers: recorded {len(got)} sha256s for {name} {p.version} in {LOCK.name}")
        else:
            bad = sorted(r for r in got if want.get(r) != got[r])
            missing = sorted(set(want) - set(got))
            if bad or missing:
                raise ClusterError(
                    f"{name} {p.version}: downloaded files differ from {LOCK.name} "
                    f"(changed or unrecorded: {bad[:5]}, missing: {missing[:5]}); "
                    f"if the pin changed on purpose: python -m mqlab.brokers.servers lock {name}"
                )
        _unpack(work)
        stamp = {"version": p.version, "files": len(got), "digest": digest(p)}
        (work / ".verified").write_text(json.dumps(stamp))
        if final.exists():
            shutil.rmtree(final)
        work.rename(final)
        os.mkdir(tmp)  # TemporaryDirectory removes what it made
    return final


def main(argv: list[str]) -> int:
    if not argv or argv[0] not in ("fetch", "lock", "path"):
        print(__doc__.split("\n\n")[-1], file=sys.stderr)
        return 2
    bench = "--bench" in argv
    argv = [a for a in argv if a != "--bench"]
    names = argv[1:] or sorted(n for n, p in pins().items() if p.bench == bench)
    try:
        if argv[0] == "path":
            print("\n".join(str(home(n)) for n in names))
        for n in names if argv[0] != "path" else ():
            fetch(n, relock=argv[0] == "lock", log=lambda s: print(s, file=sys.stderr))
    except ClusterError as e:
        print(f"servers: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
