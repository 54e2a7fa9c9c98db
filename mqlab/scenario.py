"""Scenarios: what to benchmark. ``load_scenario(path)`` validates and expands sweeps.

A scenario file names a broker *profile* (durability settings, kept apart in
``profiles/NAME.toml``) and describes cluster, workload and clients. Any scalar
of ``profile``, ``[cluster]``, ``[workload]`` or ``[clients]`` may be a list: the
scenario then expands into one run per combination (a sweep). ``[sweep.zip]``
links lists that vary together (e.g. sender and receiver nodes).
"""

from __future__ import annotations

import copy
import dataclasses
import itertools
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mqlab import typed
from mqlab.brokers import registry
from mqlab.errors import ScenarioError
from mqlab.typed import spec

FORMAT_VERSION = 1
SWEEPABLE_SECTIONS = ("cluster", "workload", "clients")
PROJECT_PROFILES = Path(__file__).resolve().parent.parent / "scenarios" / "profiles"
# Fault.partition: node ``node`` from the other brokers (clients still reach it); the
# leader's host from the other brokers (clients still reach it); every client host from
# the leader's host; node ``node`` from every other broker and client host
PARTITION_KINDS = (
    "node_from_brokers",
    "leader_from_brokers",
    "clients_from_leader",
    "majority_minority",
)
ORDERS = ("any", "strict")  # workload.order: the order requirement a run is held to
POWER_LOSS = ("power_loss", "power_loss_all")  # unsynced reboots of broker hosts
LEADER_PARTITIONS = ("leader_from_brokers", "clients_from_leader")  # aimed at the leader


@dataclass(frozen=True)
class AwsCluster:
    region: str = "eu-west-1"
    availability_zones: int = spec(1, min=1, max=6)
    broker_instance_type: str = "r5.2xlarge"
    client_instance_type: str = "r5.2xlarge"
    ebs_type: str = spec("gp3", choices=("gp2", "gp3", "io1", "io2"))
    ebs_size_gb: int = spec(100, min=8)
    operator_cidr: str | None = None
    ami_id: str = ""
    flake_rev: str = ""
    placement_group: bool = False
    ttl_hours: float = spec(8.0, min=0.25)
    ssh_user: str = "root"


@dataclass(frozen=True)
class NetnsCluster:
    """A lab of network namespaces on this machine (``target = "netns"``)."""

    delay_ms: float = spec(0.0, min=0, max=1000, help="netem delay on every host's link")
    jitter_ms: float = spec(0.0, min=0, max=1000, help="netem jitter on every host's link")
    lab: str = spec("", help="lab name; default: one per scenario shape")


@dataclass(frozen=True)
class Cluster:
    target: str = spec("local", choices=("local", "aws", "ssh", "netns"))
    nodes: int = spec(3, min=1, max=15, help="broker nodes")
    inventory: str = spec("", help='target "ssh": the hosts\' inventory file')
    clock_budget_ms: float = spec(
        5.0, min=0, help="largest clock error bound across hosts before the run is flagged"
    )
    aws: AwsCluster | None = None
    netns: NetnsCluster | None = None


@dataclass(frozen=True)
class Workload:
    message_bytes: int = spec(1024, min=24, max=16 * 1024 * 1024, help="24 B header included")
    send_batch_min: int = spec(1, min=1, max=10_000)
    send_batch_max: int = spec(10, min=1, max=10_000)
    receive_batch_max: int = spec(10, min=1, max=10_000)
    messages_per_thread: int = spec(0, min=0, help="0: use duration_s")
    duration_s: float = spec(0.0, min=0, help="0: use messages_per_thread")
    mode: str = spec("closed_loop", choices=("closed_loop", "fixed_rate"))
    rate_per_s: float = spec(0.0, min=0, help="fixed_rate: messages/s per sender thread")
    warmup_s: float = spec(0.0, min=0)
    drain_timeout_s: float = spec(
        0.0,
        min=0,
        help="longest drain after the senders stop; 0: the profile's redelivery timeout "
        "x 2 + 10 s. Receivers stop earlier once the broker holds nothing",
    )
    max_run_s: float = spec(3600.0, min=1, help="hard cap on one run's wall time")
    order: str = spec(
        "any",
        choices=ORDERS,
        help='"strict": every receiver must get each sender\'s messages in the order sent; '
        'a run that reorders any fails (after it is archived); "any": no requirement',
    )
    queues: int = spec(
        1,
        min=1,
        max=10_000,
        help="queues (topics, streams) the run spreads over: sender thread s sends to "
        "queue s % queues, receiver thread r receives from queue r % queues",
    )


@dataclass(frozen=True)
class Clients:
    sender_nodes: int = spec(1, min=1, max=1000)
    receiver_nodes: int = spec(1, min=1, max=1000)
    sender_threads: int = spec(1, min=1, max=1000)
    receiver_threads: int = spec(1, min=1, max=1000)
    threads: int | None = spec(None, min=1, max=1000, help="sets sender and receiver threads")
    processes_per_node: int | None = spec(
        None,
        min=1,
        max=1000,
        help="worker processes per client node, each running the threads; "
        "default: the node's cores",
    )


@dataclass(frozen=True)
class Fault:
    at_s: float = spec(min=0, help="seconds after senders start")
    action: str = spec(
        choices=(
            "kill_node",
            "kill_leader",
            "restart_node",
            "pause_node",
            "crash_all",
            "partition",
            "netem",
            "power_loss",
            "power_loss_all",
        )
    )
    node: int = spec(
        0,
        min=0,
        help="the node (kill_node, restart_node, pause_node, netem; partition: "
        "node_from_brokers and majority_minority)",
    )
    restart_after_s: float | None = spec(
        None,
        min=0,
        help="kill_node, crash_all: restart after this long (crash_all: 0 if unset); "
        "power_loss, power_loss_all: restart no sooner than this (the hosts reboot first)",
    )
    duration_s: float | None = spec(
        None,
        min=0,
        help="pause_node: resume after this long; partition, netem: heal after this long",
    )
    partition: str | None = spec(
        None,
        choices=PARTITION_KINDS,
        help="partition: which hosts are cut apart (blackhole routes on lab hosts)",
    )
    delay_ms: float | None = spec(
        None, min=0, max=10_000, help="netem: delay on the node's outbound link (ms)"
    )
    jitter_ms: float | None = spec(None, min=0, max=10_000, help="netem: ± this much (ms)")
    loss_pct: float | None = spec(None, min=0, max=100, help="netem: packets dropped (%)")


@dataclass(frozen=True)
class Reference:
    """The published experiment a scenario reproduces (``[reference]``): its rows are put
    next to the scenario's runs by ``mqlab compare --reference`` and the report."""

    set: str = spec(help="a published data set under mqlab/published/data/ (e.g. mqperf-2021)")
    experiment: str = spec(help="the set's experiment this scenario reproduces")


@dataclass(frozen=True)
class Profile:
    name: str
    broker: str
    description: str
    settings: Any  # the driver's Settings dataclass instance
    source: Path


@dataclass(frozen=True)
class Scenario:
    name: str
    description: str
    source: Path
    broker: str
    profile: Profile
    cluster: Cluster
    workload: Workload
    clients: Clients
    faults: tuple[Fault, ...] = ()
    sweep_point: dict[str, Any] = field(default_factory=dict)
    reference: Reference | None = None

    @property
    def label(self) -> str:
        """``<profile>_<T>t-<S>s-<R>r[_key-value...]`` as used in run directory names."""
        c = self.clients
        t = (
            f"{c.sender_threads}t"
            if c.sender_threads == c.receiver_threads
            else f"{c.sender_threads}x{c.receiver_threads}t"
        )
        parts = [self.profile.name, f"{t}-{c.sender_nodes}s-{c.receiver_nodes}r"]
        shown = {
            "profile",
            "clients.sender_threads",
            "clients.receiver_threads",
            "clients.threads",
            "clients.sender_nodes",
            "clients.receiver_nodes",
        }
        for key, value in sorted(self.sweep_point.items()):
            if key not in shown:
                parts.append(f"{key.split('.')[-1]}-{value}")
        return "_".join(parts)


def _read_toml(path: Path, what: str) -> dict[str, Any]:
    if not path.is_file():
        raise ScenarioError(path, None, f"{what} file not found", "check the path")
    try:
        with path.open("rb") as f:
            return tomllib.load(f)
    except tomllib.TOMLDecodeError as e:
        raise ScenarioError(path, None, f"TOML syntax error: {e}", "fix the TOML syntax") from None
    except OSError as e:
        raise ScenarioError(path, None, f"cannot read: {e.strerror}") from None


def find_profile(name: str, scenario_path: Path) -> Path:
    """``profiles/NAME.toml`` beside the scenario or in a parent folder, else the project's."""
    if "/" in name or name.endswith(".toml"):
        p = (scenario_path.parent / name).resolve()
        return p
    here = scenario_path.resolve().parent
    for d in [here, *list(here.parents)[:3]]:
        p = d / "profiles" / f"{name}.toml"
        if p.is_file():
            return p
    return PROJECT_PROFILES / f"{name}.toml"


def load_profile(path: Path, referenced_from: Path | None = None) -> Profile:
    if not path.is_file():
        where = referenced_from or path
        known = sorted(p.stem for p in path.parent.glob("*.toml")) if path.parent.is_dir() else []
        raise ScenarioError(
            where,
            "profile",
            f"unknown profile {path.stem!r} ({path} not found)",
            "known profiles: " + (", ".join(known) or "none"),
        )
    raw = _read_toml(path, "profile")
    allowed = {"format_version", "name", "broker", "description", "settings"}
    for key in raw:
        if key not in allowed:
            raise ScenarioError(path, key, "unknown key", "allowed: " + ", ".join(sorted(allowed)))
    _check_format_version(raw, path)
    broker = raw.get("broker")
    if broker not in registry.BROKERS:
        raise ScenarioError(
            path,
            "broker",
            f"unknown broker {broker!r}",
            "one of: " + ", ".join(sorted(registry.BROKERS)),
        )
    try:
        driver = registry.driver_class(broker)
    except (KeyError, ModuleNotFoundError):
        raise ScenarioError(
            path,
            "broker",
            f"broker {broker!r} has no driver yet",
            "brokers with drivers: " + ", ".join(_drivers()),
        ) from None
    settings_table = raw.get("settings", {})
    if not isinstance(settings_table, dict):
        raise ScenarioError(path, "settings", "expected a table", "write [settings]")
    settings: Any = typed.build(driver.Settings, settings_table, path, "settings")
    desc = raw.get("description", "")
    return Profile(
        name=str(raw.get("name", path.stem)),
        broker=broker,
        description=str(desc),
        settings=settings,
        source=path,
    )


def _drivers() -> list[str]:
    out = []
    for name in registry.available_drivers():
        try:
            registry.driver_class(name)
            out.append(name)
        except (KeyError, ModuleNotFoundError):
            pass
    return out


def _check_format_version(raw: dict[str, Any], path: Path) -> None:
    v = raw.get("format_version", FORMAT_VERSION)
    if v != FORMAT_VERSION:
        raise ScenarioError(
            path,
            "format_version",
            f"unsupported version {v!r}",
            f"this mqlab reads format_version = {FORMAT_VERSION}",
        )


def _sweep_axes(raw: dict[str, Any], path: Path) -> list[list[list[tuple[str, Any]]]]:
    """Each axis is a list of alternatives; an alternative is a list of (key, value)."""
    axes: list[list[list[tuple[str, Any]]]] = []
    if isinstance(raw.get("profile"), list):
        axes.append([[("profile", v)] for v in raw["profile"]])
    zipped: dict[str, list[Any]] = {}
    sweep = raw.get("sweep", {})
    if not isinstance(sweep, dict) or set(sweep) - {"zip"}:
        raise ScenarioError(
            path,
            "sweep",
            "only [sweep.zip] is allowed here",
            'e.g. [sweep.zip] "clients.sender_nodes" = [1, 2]',
        )
    zipped = sweep.get("zip", {})
    lengths = set()
    for key, values in zipped.items():
        if not isinstance(values, list) or not values:
            raise ScenarioError(path, f"sweep.zip.{key}", "expected a non-empty list")
        sect, _, name = key.partition(".")
        if sect not in SWEEPABLE_SECTIONS or not name:
            raise ScenarioError(
                path,
                f"sweep.zip.{key}",
                "not a sweepable key",
                "use SECTION.KEY with SECTION one of " + ", ".join(SWEEPABLE_SECTIONS),
            )
        lengths.add(len(values))
    if len(lengths) > 1:
        raise ScenarioError(path, "sweep.zip", "lists of different lengths", "make them equal")
    if zipped:
        n = lengths.pop()
        axes.append([[(k, v[i]) for k, v in zipped.items()] for i in range(n)])
    for sect in SWEEPABLE_SECTIONS:
        table = raw.get(sect, {})
        if not isinstance(table, dict):
            continue
        for key, value in table.items():
            if isinstance(value, list):
                if not value:
                    raise ScenarioError(
                        path, f"{sect}.{key}", "empty list", "give at least one value"
                    )
                axes.append([[(f"{sect}.{key}", v)] for v in value])
    return axes


def load_scenario(path: str | Path) -> list[Scenario]:
    """Read, validate and expand a scenario file: one Scenario per sweep point."""
    path = Path(path)
    raw = _read_toml(path, "scenario")
    allowed = {
        "format_version",
        "name",
        "description",
        "broker",
        "profile",
        "cluster",
        "workload",
        "clients",
        "faults",
        "sweep",
        "reference",
    }
    for key in raw:
        if key not in allowed:
            raise ScenarioError(path, key, "unknown key", "allowed: " + ", ".join(sorted(allowed)))
    _check_format_version(raw, path)
    name = raw.get("name", path.stem)
    if not isinstance(name, str) or not name or any(c in name for c in "/\\ _"):
        raise ScenarioError(
            path, "name", f"{name!r} is not a valid name", "use letters, digits, '-' and '.'"
        )
    if "profile" not in raw:
        raise ScenarioError(
            path, "profile", "missing", 'add profile = "NAME" (a file profiles/NAME.toml)'
        )
    axes = _sweep_axes(raw, path)
    points = list(itertools.product(*axes)) if axes else [()]
    out = []
    profiles: dict[str, Profile] = {}
    for point in points:
        concrete = copy.deepcopy(raw)
        concrete.pop("sweep", None)
        varied: dict[str, Any] = {}
        for alternative in point:
            for key, value in alternative:
                varied[key] = value
                if key == "profile":
                    concrete["profile"] = value
                else:
                    sect, _, k = key.partition(".")
                    concrete.setdefault(sect, {})[k] = value
        out.append(_build_one(concrete, path, name, varied, profiles))
    return out


def _build_one(
    raw: dict[str, Any], path: Path, name: str, varied: dict[str, Any], profiles: dict[str, Profile]
) -> Scenario:
    pname = raw["profile"]
    if not isinstance(pname, str):
        raise ScenarioError(path, "profile", f"expected a profile name, got {pname!r}")
    if pname not in profiles:
        profiles[pname] = load_profile(find_profile(pname, path), referenced_from=path)
    profile = profiles[pname]
    broker = raw.get("broker", profile.broker)
    if broker != profile.broker:
        raise ScenarioError(
            path,
            "broker",
            f"{broker!r} does not match profile {pname!r} (broker {profile.broker!r})",
            "remove broker or pick a matching profile",
        )
    cluster = typed.build(Cluster, raw.get("cluster", {}), path, "cluster")
    if "receiver_idle_timeout_s" in raw.get("workload", {}):
        raise ScenarioError(
            path,
            "workload.receiver_idle_timeout_s",
            "removed: receivers now drain until the broker holds nothing (or drain_timeout_s)",
            "delete the line, or write drain_timeout_s = SECONDS for a longest drain",
        )
    workload = typed.build(Workload, raw.get("workload", {}), path, "workload")
    clients = typed.build(Clients, raw.get("clients", {}), path, "clients")
    if clients.threads is not None:
        for k in ("sender_threads", "receiver_threads"):
            if k in raw.get("clients", {}):
                raise ScenarioError(
                    path,
                    f"clients.{k}",
                    "given together with clients.threads",
                    "use either threads or sender_threads/receiver_threads",
                )
        clients = dataclasses.replace(
            clients, sender_threads=clients.threads, receiver_threads=clients.threads, threads=None
        )
    faults_raw = raw.get("faults", [])
    if not isinstance(faults_raw, list):
        raise ScenarioError(path, "faults", "expected an array of tables", "write [[faults]]")
    faults = tuple(typed.build(Fault, f, path, f"faults[{i}]") for i, f in enumerate(faults_raw))
    _cross_checks(path, cluster, workload, profile, faults)
    _check_queues(path, workload, clients)
    reference = _reference(raw.get("reference"), path)
    scenario = Scenario(
        name=name,
        description=str(raw.get("description", "")),
        source=path,
        broker=profile.broker,
        profile=profile,
        cluster=cluster,
        workload=workload,
        clients=clients,
        faults=faults,
        sweep_point=varied,
        reference=reference,
    )
    if cluster.target == "aws":
        from mqlab.labs.aws.validate import validate_aws

        validate_aws(scenario)
    return scenario


def _reference(table: Any, path: Path) -> Reference | None:
    """``[reference]``: a known published data set and one of its experiments."""
    if table is None:
        return None
    from mqlab.published import sets as published

    if not isinstance(table, dict):
        raise ScenarioError(path, "reference", "expected a table", "write [reference]")
    ref = typed.build(Reference, table, path, "reference")
    if ref.set not in published.names():
        raise ScenarioError(
            path,
            "reference.set",
            f"unknown published data set {ref.set!r}",
            "one of: " + ", ".join(published.names()),
        )
    known = published.get(ref.set).experiments()
    if ref.experiment not in known:
        raise ScenarioError(
            path,
            "reference.experiment",
            f"{ref.set} has no experiment {ref.experiment!r}",
            "one of: " + ", ".join(sorted(known)),
        )
    return ref


def _cross_checks(
    path: Path, cluster: Cluster, workload: Workload, profile: Profile, faults: tuple[Fault, ...]
) -> None:
    w = workload
    if w.send_batch_min > w.send_batch_max:
        raise ScenarioError(
            path,
            "workload.send_batch_min",
            f"{w.send_batch_min} is greater than send_batch_max {w.send_batch_max}",
            "make send_batch_min <= send_batch_max",
        )
    if (w.messages_per_thread > 0) == (w.duration_s > 0):
        raise ScenarioError(
            path,
            "workload.messages_per_thread",
            "give exactly one of messages_per_thread and duration_s",
            "set one of them > 0 and leave the other out",
        )
    if w.mode == "fixed_rate" and w.rate_per_s <= 0:
        raise ScenarioError(
            path,
            "workload.rate_per_s",
            "fixed_rate needs rate_per_s > 0",
            "set rate_per_s (messages/s per sender thread)",
        )
    replicas = getattr(profile.settings, "replicas", None)
    if isinstance(replicas, int) and replicas > cluster.nodes:
        raise ScenarioError(
            path,
            "cluster.nodes",
            f"{cluster.nodes} nodes cannot hold {replicas} replicas (profile {profile.name})",
            f"use nodes >= {replicas} or a profile with fewer replicas",
        )
    for i, f in enumerate(faults):
        if f.action == "kill_leader" and profile.broker == "sqs":
            raise ScenarioError(
                path,
                f"faults[{i}].action",
                "sqs has no leader node to kill",
                "use kill_node, or a broker with a leader",
            )
        if f.action == "pause_node" and f.duration_s is None:
            raise ScenarioError(
                path,
                f"faults[{i}].duration_s",
                "pause_node needs how long the node stays frozen",
                "set duration_s = 5 (seconds)",
            )
        if f.action == "partition":
            _check_partition(path, i, f, cluster, profile)
        elif f.partition is not None:
            raise ScenarioError(
                path,
                f"faults[{i}].partition",
                f"{f.action} takes no partition",
                'use action = "partition" to cut hosts apart',
            )
        _check_netem(path, i, f, cluster, profile)
        if f.action in POWER_LOSS and cluster.target not in ("ssh", "aws"):
            raise ScenarioError(
                path,
                f"faults[{i}].action",
                f"{f.action} reboots a host's kernel unsynced, and on target "
                f'"{cluster.target}" that kernel is this machine\'s',
                'run it on hosts of their own: target = "ssh" or "aws"',
            )
        if f.action in POWER_LOSS:
            _check_self_hosted(path, f"faults[{i}]", profile, "no host to cut the power of")
        if f.duration_s is not None and f.action not in ("pause_node", "partition", "netem"):
            raise ScenarioError(
                path,
                f"faults[{i}].duration_s",
                f"{f.action} takes no duration_s",
                "use restart_after_s for kill_node and crash_all",
            )
        if f.node >= cluster.nodes:
            raise ScenarioError(
                path,
                f"faults[{i}].node",
                f"node {f.node} does not exist",
                f"nodes are 0..{cluster.nodes - 1}",
            )
    _check_partitions_apart(path, faults)
    _check_netem_apart(path, faults)
    if cluster.target == "ssh" and not cluster.inventory:
        raise ScenarioError(
            path,
            "cluster.inventory",
            'target = "ssh" needs the hosts\' inventory file',
            'set inventory = "hosts.json" (format: docs/fleet.md)',
        )
    if cluster.target != "ssh" and cluster.inventory:
        raise ScenarioError(
            path,
            "cluster.inventory",
            f'an inventory file is only read for target = "ssh" (target is {cluster.target!r})',
            'remove inventory, or set target = "ssh"',
        )
    if cluster.target in ("local", "netns", "ssh") and (
        registry.BROKERS[profile.broker].local_cluster is None
    ):
        raise ScenarioError(
            path,
            "cluster.target",
            f"broker {profile.broker!r} has no local cluster",
            'use target = "aws"',
        )


def least_threads(clients: Clients, role: str) -> int:
    """The fewest threads of ``role`` a run of ``clients`` has in total: nodes x processes
    per node x threads, counting a node whose processes follow its cores as one process
    (the least it runs), so that the answer does not depend on the machine."""
    c = clients
    nodes, threads = (
        (c.sender_nodes, c.sender_threads)
        if role == "sender"
        else (c.receiver_nodes, c.receiver_threads)
    )
    return nodes * (c.processes_per_node or 1) * threads


def _check_queues(path: Path, workload: Workload, clients: Clients) -> None:
    """Every queue has a sender thread and a receiver thread (assigned round robin)."""
    n = workload.queues
    for role in ("receiver", "sender"):
        have = least_threads(clients, role)
        if have < n:
            raise ScenarioError(
                path,
                "workload.queues",
                f"{n} queues but {have} {role} thread(s) in all "
                f"({role}_nodes x processes_per_node x {role}_threads): "
                f"{n - have} queue(s) would have no {role}",
                f"lower queues to {have}, or raise clients.{role}_threads "
                f"(or {role}_nodes, processes_per_node) to {n} {role} threads in all",
            )


def _check_partition(path: Path, i: int, f: Fault, cluster: Cluster, profile: Profile) -> None:
    """A partition: lab hosts only, a kind, how long, brokers to cut apart."""
    key = f"faults[{i}]"
    _check_lab(path, key, cluster, "a partition cuts hosts apart")
    _check_self_hosted(path, key, profile, "nothing to cut apart")
    if f.partition is None:
        raise ScenarioError(
            path,
            f"{key}.partition",
            "a partition needs which hosts to cut apart",
            "set partition = one of " + ", ".join(f'"{k}"' for k in PARTITION_KINDS),
        )
    _check_heals(path, key, f, "a partition", "it heals", "the partition heals")
    if f.partition != "clients_from_leader" and cluster.nodes < 2:
        who = "the leader" if f.partition == "leader_from_brokers" else f"node {f.node}"
        raise ScenarioError(
            path,
            f"{key}.partition",
            f"{f.partition} needs other brokers to cut {who} from (nodes = 1)",
            'use nodes >= 2, or partition = "clients_from_leader"',
        )


def _check_netem(path: Path, i: int, f: Fault, cluster: Cluster, profile: Profile) -> None:
    """netem: lab hosts only, something to do, how long; its settings on netem only."""
    key = f"faults[{i}]"
    given = [k for k in ("delay_ms", "jitter_ms", "loss_pct") if getattr(f, k) is not None]
    if f.action != "netem":
        if given:
            raise ScenarioError(
                path,
                f"{key}.{given[0]}",
                f"{f.action} takes no {given[0]}",
                'use action = "netem" to slow down or drop packets on a link',
            )
        return
    _check_lab(path, key, cluster, "netem slows a host's own link")
    _check_self_hosted(path, key, profile, "no link to slow down")
    if not (f.delay_ms or f.loss_pct):
        raise ScenarioError(
            path,
            f"{key}.delay_ms",
            "netem needs a delay or a loss",
            "set delay_ms = 50 and/or loss_pct = 2",
        )
    if f.jitter_ms and not f.delay_ms:
        raise ScenarioError(
            path,
            f"{key}.jitter_ms",
            "jitter varies a delay: there is none",
            "set delay_ms as well",
        )
    _check_heals(path, key, f, "netem", "the link heals", "the link heals")


def _check_lab(path: Path, key: str, cluster: Cluster, what: str) -> None:
    """A fault between hosts: refused on a local cluster (one machine, one network stack)."""
    if cluster.target == "local":
        raise ScenarioError(
            path,
            f"{key}.action",
            f"{what}: every node of a local cluster is on this machine",
            'run on a lab: cluster.target = "netns"',
        )


def _check_self_hosted(path: Path, key: str, profile: Profile, nothing: str) -> None:
    """A fault on broker hosts: refused for a broker that runs on none (SQS)."""
    if not registry.BROKERS[profile.broker].self_hosted:
        raise ScenarioError(
            path,
            f"{key}.action",
            f"{profile.broker} runs on no host of the lab: {nothing}",
            "use a self-hosted broker",
        )


def _check_heals(path: Path, key: str, f: Fault, what: str, heals: str, fix: str) -> None:
    """A fault that heals by itself: it needs duration_s and takes no restart_after_s."""
    if f.duration_s is None:
        raise ScenarioError(
            path,
            f"{key}.duration_s",
            f"{what} needs how long it lasts before {heals}",
            "set duration_s = 5 (seconds)",
        )
    if f.restart_after_s is not None:
        raise ScenarioError(
            path,
            f"{key}.restart_after_s",
            f"{f.action} takes no restart_after_s",
            f"use duration_s: {fix} after it",
        )


def _check_partitions_apart(path: Path, faults: tuple[Fault, ...]) -> None:
    """One partition at a time: two in place at once could need the same route."""
    cuts = sorted(
        (f.at_s, i, f.at_s + (f.duration_s or 0.0))
        for i, f in enumerate(faults)
        if f.action == "partition"
    )
    for (_at, i, healed), (at, j, _end) in itertools.pairwise(cuts):
        if at < healed:
            raise ScenarioError(
                path,
                f"faults[{j}].at_s",
                f"this partition starts at {at:g} s, before the one of faults[{i}] heals "
                f"({healed:g} s)",
                f"start it at {healed:g} s or later: one partition at a time",
            )


def _check_netem_apart(path: Path, faults: tuple[Fault, ...]) -> None:
    """One netem per node at a time: one link, one impairment."""
    spans = sorted(
        (f.node, f.at_s, i, f.at_s + (f.duration_s or 0.0))
        for i, f in enumerate(faults)
        if f.action == "netem"
    )
    for (node, _at, i, healed), (node_b, at, j, _end) in itertools.pairwise(spans):
        if node == node_b and at < healed:
            raise ScenarioError(
                path,
                f"faults[{j}].at_s",
                f"this netem on node {node} starts at {at:g} s, before the one of faults[{i}] "
                f"heals ({healed:g} s)",
                f"start it at {healed:g} s or later: one netem per node at a time",
            )


def to_toml(scenario: Scenario) -> str:
    """The scenario as run: one sweep point, the profile resolved inline."""
    doc: dict[str, Any] = {
        "format_version": FORMAT_VERSION,
        "name": scenario.name,
        "description": scenario.description,
        "broker": scenario.broker,
        "profile": scenario.profile.name,
        "cluster": typed.to_table(scenario.cluster),
        "workload": typed.to_table(scenario.workload),
        "clients": typed.to_table(scenario.clients),
    }
    if scenario.faults:
        doc["faults"] = [typed.to_table(f) for f in scenario.faults]
    if scenario.reference:
        doc["reference"] = typed.to_table(scenario.reference)
    doc["resolved_profile"] = {
        "name": scenario.profile.name,
        "broker": scenario.profile.broker,
        "description": scenario.profile.description,
        "settings": typed.to_table(scenario.profile.settings),
    }
    if scenario.sweep_point:
        doc["sweep_point"] = dict(scenario.sweep_point)
    return dump_toml(doc)


def _toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int | float):
        return repr(v)
    if isinstance(v, str):
        return '"' + v.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'
    if isinstance(v, list | tuple):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    raise TypeError(f"cannot write {type(v)} to TOML")


def dump_toml(doc: dict[str, Any], prefix: str = "") -> str:
    lines: list[str] = []
    tables: list[tuple[str, Any]] = []
    for k, v in doc.items():
        key = k if k.replace("_", "").replace("-", "").isalnum() else _toml_value(k)
        if isinstance(v, dict) or isinstance(v, list) and v and all(isinstance(x, dict) for x in v):
            tables.append((key, v))
        else:
            lines.append(f"{key} = {_toml_value(v)}")
    for key, v in tables:
        full = f"{prefix}.{key}" if prefix else key
        if isinstance(v, dict):
            lines.append(f"\n[{full}]")
            lines.append(dump_toml(v, full).rstrip("\n"))
        else:
            for item in v:
                lines.append(f"\n[[{full}]]")
                lines.append(dump_toml(item, full).rstrip("\n"))
    return "\n".join(x for x in lines if x != "") + "\n"
