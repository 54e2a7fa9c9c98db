"""The flake's own logic, evaluated by real Nix against the stub nixpkgs.

What this proves: the flake's outputs, the set of images, the broker modules'
settings, the Python dependency mapping and the revision wiring evaluate as
intended. What it cannot prove: that nixpkgs' real options and package names
match (only `nix flake check` on a networked runner does; see docs/nix.md).
"""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import pytest

from mqlab.brokers.registry import self_hosted_brokers
from mqlab.images.build import ImageError, build_image

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
SYSTEM = "x86_64-linux"
NIXPKGS_STUB_REV = "0" * 40

# one expression returns what every node's configuration says, in one evaluation
NODE_SUMMARY = """cfgs: builtins.mapAttrs (n: c: {
  image = builtins.fromJSON c.config.environment.etc."mqlab/broker.json".text;
  chrony = c.config.services.chrony.extraConfig;
  chronyEnabled = c.config.services.chrony.enable;
  timeServers = c.config.networking.timeServers;
  firewall = c.config.networking.firewall.extraCommands;
  sshPasswords = c.config.services.openssh.settings.PasswordAuthentication;
  services = builtins.attrNames c.config.systemd.services;
  nodeStart = c.config.systemd.services.mqlab-node.serviceConfig.ExecStart;
  volume = c.config.systemd.services.mqlab-data-volume.script;
  sysctl = c.config.boot.kernel.sysctl;
  amazonImage = c.config.system.build.amazonImage.name;
}) cfgs"""


@pytest.fixture(scope="module")
def nodes(nixenv) -> dict:
    out = nixenv.eval_json("nixosConfigurations", NODE_SUMMARY)
    assert isinstance(out, dict)
    return out


def test_ami_outputs_are_the_self_hosted_brokers_plus_client(nixenv) -> None:
    names = nixenv.eval_json(f"packages.{SYSTEM}", "builtins.attrNames")
    amis = {n.removeprefix("ami-") for n in names if n.startswith("ami-")}
    assert amis - {"client"} == set(self_hosted_brokers())
    assert "client" in amis
    assert {"mqlab", "worker", "default"} <= set(names)


def test_one_nixos_configuration_per_image(nodes) -> None:
    assert set(nodes) == set(self_hosted_brokers()) | {"client"}
    for name, node in nodes.items():
        assert node["image"]["broker"] == name
        assert node["amazonImage"] == f"nixos-amazon-image-mqlab-{name}"


def test_nixpkgs_pin_is_an_exact_commit_in_the_url() -> None:
    text = (REPO / "flake.nix").read_text()
    line = next(ln for ln in text.splitlines() if "inputs.nixpkgs.url" in ln)
    url = line.split('"')[1]
    owner_repo, rev = url.rsplit("/", 1)
    assert owner_repo == "github:NixOS/nixpkgs"
    assert len(rev) == 40 and all(c in "0123456789abcdef" for c in rev)


def test_revisions_reach_the_wrappers_and_images(nixenv, nodes) -> None:
    args = nixenv.eval_json(f"packages.{SYSTEM}.mqlab.stubArgs.makeWrapperArgs")
    assert args[:6] == [
        "--set",
        "MQLAB_FLAKE_REV",
        "dirty",
        "--set",
        "MQLAB_NIXPKGS_REV",
        NIXPKGS_STUB_REV,
    ]
    text = nixenv.eval_json(f"packages.{SYSTEM}.worker.stubArgs.text")
    assert "export MQLAB_FLAKE_REV='dirty'" in text
    assert f"export MQLAB_NIXPKGS_REV='{NIXPKGS_STUB_REV}'" in text
    assert "-m mqlab.workload.worker" in text
    for node in nodes.values():
        assert node["image"]["flake_rev"] == "dirty"
        assert node["image"]["nixpkgs_rev"] == NIXPKGS_STUB_REV


def test_every_pyproject_dependency_is_provided(nixenv) -> None:
    declared = nixenv.eval_json(f"packages.{SYSTEM}.mqlab.declared")
    deps = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    assert len(declared) == len(deps)
    app = nixenv.eval_json(f"packages.{SYSTEM}.mqlab.stubArgs.dependencies", "map (p: p.pname)")
    for name in ("click", "pyspark", "duckdb", "nats-py", "psycopg", "hdrhistogram"):
        assert name in app


def test_hdrhistogram_is_built_from_the_uv_lock_sdist(nixenv) -> None:
    deps = nixenv.eval_json(
        f"packages.{SYSTEM}.worker.workerPython.stubArgs.packages",
        "ps: map (p: { n = p.pname; d = map (x: x.pname) p.stubArgs.dependencies; "
        "s = map (x: x.stubArgs.src.stubArgs or null) p.stubArgs.dependencies; }) ps",
    )
    (lib,) = deps
    hdr = lib["s"][lib["d"].index("hdrhistogram")]
    lock = tomllib.loads((REPO / "uv.lock").read_text())
    locked = next(p for p in lock["package"] if p["name"] == "hdrhistogram")
    assert hdr == {"url": locked["sdist"]["url"], "hash": locked["sdist"]["hash"]}


def test_rocketmq_client_is_built_from_the_uv_lock_sdist_with_its_dependencies(nixenv) -> None:
    """Not in nixpkgs: built from uv.lock's sdist, its run-time dependencies from nixpkgs
    (python-deps.nix ``dependencies``)."""
    (lib,) = nixenv.eval_json(
        f"packages.{SYSTEM}.worker.workerPython.stubArgs.packages",
        "ps: map (p: map (x: { n = x.pname; s = x.stubArgs.src.stubArgs or null; "
        "d = map (y: y.pname) (x.stubArgs.dependencies or [ ]); }) p.stubArgs.dependencies) ps",
    )
    (rmq,) = [p for p in lib if p["n"] == "rocketmq-python-client"]
    lock = tomllib.loads((REPO / "uv.lock").read_text())
    locked = next(p for p in lock["package"] if p["name"] == "rocketmq-python-client")
    assert rmq["s"] == {"url": locked["sdist"]["url"], "hash": locked["sdist"]["hash"]}
    assert sorted(rmq["d"]) == sorted(d["name"] for d in locked["dependencies"])


def test_kurrentdbclient_is_built_from_the_uv_lock_sdist_with_its_runtime_deps(nixenv) -> None:
    """Not in nixpkgs: its sdist (URL and hash from uv.lock), built with poetry-core, and
    what it imports at run time from nixpkgs, or the worker could not import it."""
    (lib,) = nixenv.eval_json(
        f"packages.{SYSTEM}.worker.workerPython.stubArgs.packages",
        "ps: map (p: map (x: { v = x.version; src = x.stubArgs.src.stubArgs; "
        "build = map (y: y.pname) x.stubArgs.build-system; "
        "deps = map (y: y.pname) x.stubArgs.dependencies; }) "
        '(builtins.filter (x: x.pname == "kurrentdbclient") p.stubArgs.dependencies)) ps',
    )
    (kdb,) = lib
    lock = tomllib.loads((REPO / "uv.lock").read_text())
    locked = next(p for p in lock["package"] if p["name"] == "kurrentdbclient")
    assert kdb["v"] == locked["version"]
    assert kdb["src"] == {"url": locked["sdist"]["url"], "hash": locked["sdist"]["hash"]}
    assert kdb["build"] == ["poetry-core"]
    runtime = set(kdb["deps"])
    assert runtime == {
        "grpcio",
        "grpcio-tools",
        "grpcio-status",
        "protobuf",
        "googleapis-common-protos",
        "typing-extensions",
    }
    # every runtime requirement uv.lock records for it is among them
    assert {d["name"] for d in locked["dependencies"]} <= runtime


def test_worker_closure_holds_only_the_worker_libraries(nixenv) -> None:
    worker = nixenv.eval_json(f"packages.{SYSTEM}.worker.workerDeps")
    assert sorted(worker) == sorted(
        [
            "click",
            "hdrhistogram",
            "pyroaring",
            "numpy",
            "nats-py",
            "psycopg",
            "redis",
            "pika",
            "confluent-kafka",
            "boto3",
            "pymongo",
            "pulsar-client",
            "rocketmq-python-client",
            "kurrentdbclient",
        ]
    )
    lib_deps = nixenv.eval_json(
        f"packages.{SYSTEM}.worker.workerPython.stubArgs.packages",
        "ps: map (p: map (x: x.pname) p.stubArgs.dependencies) ps",
    )
    names = set(lib_deps[0])
    assert not names & {"pyspark", "duckdb", "matplotlib", "pyarrow", "fabric", "moto", "rich"}
    assert "hiredis" in names


def test_app_and_dev_shell(nixenv) -> None:
    app = nixenv.eval_json(f"apps.{SYSTEM}.default")
    assert app["type"] == "app" and app["program"].endswith("-mqlab/bin/mqlab")
    shell = nixenv.eval_json(f"devShells.{SYSTEM}.default.stubArgs.packages", "map (p: p.pname)")
    assert {"terraform", "uv", "python3", "jdk17_headless", "awscli2"} <= set(shell)


def test_checks_cover_packages_closure_and_every_node(nixenv) -> None:
    names = set(nixenv.eval_json(f"checks.{SYSTEM}", "builtins.attrNames"))
    assert {"mqlab", "worker", "worker-closure"} <= names
    assert {f"nixos-{b}" for b in self_hosted_brokers()} <= names


def test_base_module_time_ssh_firewall_data(nodes) -> None:
    for name, node in nodes.items():
        assert "server 169.254.169.123" in node["chrony"], name
        assert node["chronyEnabled"] and node["timeServers"] == ["169.254.169.123"]
        assert node["sshPasswords"] is False
        assert "mqlab-node" in node["services"] and "mqlab-data-volume" in node["services"]
        assert "bootstrap --broker" in node["nodeStart"]
        assert "mkfs.xfs" in node["volume"] and "/var/lib/mqlab" in node["volume"]
        assert node["sysctl"]["vm.swappiness"] == 1
        ports = node["image"]["ports"]
        if name == "client":
            assert ports == [] and node["firewall"] == ""
        else:
            assert ports
            # broker ports only from private ranges, never 0.0.0.0/0
            for port in ports:
                assert f"-s 10.0.0.0/8 --dport {port} -j nixos-fw-accept" in node["firewall"]
            assert "0.0.0.0/0" not in node["firewall"]
            assert any(s.startswith(f"mqlab-{name}") for s in node["services"]), name


def _settings(nodes: dict, broker: str) -> dict:
    return nodes[broker]["image"]["settings"]


def test_profile_settings_kafka(nodes) -> None:
    s = _settings(nodes, "kafka")
    assert s["default.replication.factor"] == 3
    assert s["min.insync.replicas"] == 2
    assert s["process.roles"] == "broker,controller"  # KRaft
    assert not any("zookeeper" in k for k in s)


def test_profile_settings_rabbitmq(nodes) -> None:
    assert _settings(nodes, "rabbitmq")["default_queue_type"] == "quorum"


def test_profile_settings_postgres(nodes) -> None:
    s = _settings(nodes, "postgres")
    assert s["synchronous_standby_names"].startswith("ANY 1 (")
    assert s["synchronous_commit"] == "remote_write"


def test_profile_settings_nats(nodes) -> None:
    s = _settings(nodes, "nats")
    assert s["mqlab.stream_replicas"] == 3 and s["mqlab.jetstream"] is True


def test_profile_settings_redis(nodes) -> None:
    s = _settings(nodes, "redis")
    assert s["appendonly"] is True and s["mqlab.replicas"] == 2


def test_profile_settings_others(nodes) -> None:
    assert _settings(nodes, "redpanda")["default_topic_replications"] == 3
    assert _settings(nodes, "mongodb")["defaultWriteConcern"] == "majority"
    p = _settings(nodes, "pulsar")
    assert (p["managedLedgerDefaultWriteQuorum"], p["managedLedgerDefaultAckQuorum"]) == (3, 2)
    a = _settings(nodes, "artemis")  # mqperf 2021's journal: mapped, not synced
    assert a["journal-type"] == "MAPPED" and a["journal-sync-transactional"] is False
    assert _settings(nodes, "rocketmq")["flushDiskType"] == "ASYNC_FLUSH"  # as mqperf 2021
    assert _settings(nodes, "eventstore")["UnsafeDisableFlushToDisk"] is False


def test_mongodb_release_is_pinned_with_the_recipe_hash(nixenv, nodes) -> None:
    """images/brokers/mongodb.nix overrides nixpkgs' mongodb-ce with one release, its URL
    and hash as nixpkgs' recipe has them (the comment there names the commit)."""
    assert nodes["mongodb"]["image"]["version"] == "8.2.6"
    src = nixenv.eval_json(
        "nixosConfigurations.mongodb.config.mqlab.node.package.stubOverride.src.stubArgs"
    )
    assert src == {
        "url": "https://fastdl.mongodb.org/linux/mongodb-linux-x86_64-ubuntu2404-8.2.6.tgz",
        "hash": "sha256-VjFKDwqBI42XQwL7/+eGLv6WlMSY6tYqC8qSy1laDfA=",
    }


def test_eventstore_release_is_pinned_with_the_recipe_hash(nixenv, nodes) -> None:
    """images/brokers/eventstore.nix overrides nixpkgs' eventstore with one release: tag
    and hash as nixpkgs' recipe has them (the comment there names the commit)."""
    assert nodes["eventstore"]["image"]["version"] == "24.10.6"
    override = nixenv.eval_json(
        "nixosConfigurations.eventstore.config.mqlab.node.package.stubOverride",
        "o: { src = o.src.stubArgs; v = o.MINVERVERSIONOVERRIDE; }",
    )
    assert override == {
        "src": {
            "owner": "EventStore",
            "repo": "EventStore",
            "tag": "v24.10.6",
            "hash": "sha256-8/sagvMyJ1/onGMuJ28QLWI5M8dBDWyGOcZKUv3PJsQ=",
            "leaveDotGit": True,
        },
        "v": "24.10.6",
    }
    image = nodes["eventstore"]["image"]
    assert image["ports"] == [2113, 1112]
    assert image["settings"]["mqlab.quorum"] == 2 and image["settings"]["Insecure"] is True
    assert "mqlab-eventstore" in nodes["eventstore"]["services"]


JVM_SERVERS = ("kafka", "pulsar", "artemis", "rocketmq")


@pytest.mark.parametrize("broker", JVM_SERVERS)
def test_jvm_servers_are_the_files_mqlab_runs_locally(nixenv, nodes, broker: str) -> None:
    """nix/servers.nix: the image's package is the server of servers.toml at its version,
    every file servers.lock.json records fetched from Maven Central by its recorded path
    with its recorded sha256, and nothing else."""
    from mqlab.brokers import servers

    assert nodes[broker]["image"]["version"] == servers.pin(broker).version
    entry = json.loads(servers.LOCK.read_text())[broker]
    pkg = f"nixosConfigurations.{broker}.config.mqlab.node.package"
    files = nixenv.eval_json(f"{pkg}.files", "fs: builtins.mapAttrs (k: v: v.stubArgs) fs")
    assert isinstance(files, dict) and sorted(files) == sorted(entry["files"])
    for rel, args in files.items():
        path = entry["maven"][rel]
        assert path.endswith("/" + rel.split("/", 1)[1]), rel
        assert args == {
            "url": f"https://repo1.maven.org/maven2/{path}",
            "sha256": entry["files"][rel],
        }


def test_jvm_servers_start_their_main_classes_on_that_class_path(nixenv) -> None:
    services = nixenv.eval_json(
        "nixosConfigurations",
        "cfgs: builtins.mapAttrs (n: c: c.config.mqlab.node.services // "
        '{ pkg = "${c.config.mqlab.node.package}"; }) '
        f"(builtins.intersectAttrs {{ {' '.join(f'{b} = 1;' for b in JVM_SERVERS)} }} cfgs)",
    )
    assert isinstance(services, dict)
    want = {
        "kafka": ["kafka.tools.StorageTool format", 'kafka.Kafka "$conf"'],
        "pulsar": [
            "org.apache.zookeeper.server.quorum.QuorumPeerMain",
            "org.apache.bookkeeper.server.Main",
            "org.apache.pulsar.PulsarClusterMetadataSetup",
            "org.apache.pulsar.PulsarBrokerStarter",
        ],
        "rocketmq": [
            "NamesrvStartup -c /run/mqlab/conf/namesrv.conf",
            "ProxyStartup -pm local",
            "-bc /run/mqlab/conf/broker.conf -pc /run/mqlab/conf/rmq-proxy.json",
        ],
    }
    for broker, parts in want.items():
        s = services[broker]
        text = "\n".join(v for k, v in s.items() if k != "pkg")
        assert text.count(f"-cp '{s['pkg']}/lib/*'") >= len([k for k in s if k != "pkg"]), broker
        for part in parts:
            assert part in text, (broker, part)
    from mqlab.brokers import servers

    artemis, v = services["artemis"], servers.pin("artemis").version
    assert (
        f"{artemis['pkg']}/dist/apache-artemis-{v}/bin/artemis create" in artemis["mqlab-artemis"]
    )


def test_a_new_dependency_without_mapping_fails_evaluation(nixenv) -> None:
    pyproject = nixenv.src / "pyproject.toml"
    original = pyproject.read_text()
    try:
        pyproject.write_text(original.replace('"click>=8.1",', '"click>=8.1",\n    "left-pad>=1",'))
        proc = nixenv.run(
            "eval",
            "--json",
            f"path:{nixenv.src}#packages.{SYSTEM}.mqlab.stubArgs.dependencies",
            "--override-input",
            "nixpkgs",
            f"path:{nixenv.src}/nix/stub-nixpkgs",
            "--apply",
            "map (p: p.pname)",
        )
        assert proc.returncode != 0
        assert "'left-pad' has no entry in nix/python-deps.nix" in proc.stderr
    finally:
        pyproject.write_text(original)


def test_flake_check_without_building(nixenv) -> None:
    proc = nixenv.run(
        "flake",
        "check",
        "--no-build",
        f"path:{nixenv.src}",
        "--override-input",
        "nixpkgs",
        f"path:{nixenv.src}/nix/stub-nixpkgs",
    )
    assert proc.returncode == 0, proc.stderr


def test_images_build_reports_a_failed_nix_build_in_one_line(nixenv, monkeypatch, tmp_path) -> None:
    """`mqlab images build` with real nix, on a build that cannot succeed here."""
    for key, value in nixenv.env.items():
        monkeypatch.setenv(key, value)
    with pytest.raises(ImageError) as err:
        build_image(
            "kafka",
            f"path:{nixenv.src}",
            out_link=tmp_path / "result",
            nix_args=["--override-input", "nixpkgs", f"path:{nixenv.src}/nix/stub-nixpkgs"],
        )
    text = str(err.value)
    assert text.startswith(f"nix build path:{nixenv.src}#ami-kafka failed: ")
    assert "\n" not in text
