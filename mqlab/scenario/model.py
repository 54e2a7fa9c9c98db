"""The scenario model: the frozen dataclasses a run is described by (``Workload``,
``Clients``, ``Cluster``, ``Fault``, ...). Workers import this module alone: it needs
nothing but :mod:`mqlab.typed`'s field specs and the fault log's vocabulary
(:mod:`mqlab.archive.faultlog`, standard library only)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mqlab.archive import faultlog as fl
from mqlab.typed import spec

FORMAT_VERSION = 1
ORDERS = ("any", "strict")  # workload.order: the order requirement a run is held to
# Fault.partition kinds aimed at the node that leads the queue when the fault strikes
LEADER_PARTITIONS = (fl.LEADER_FROM_BROKERS, fl.CLIENTS_FROM_LEADER)


@dataclass(frozen=True)
class Takes:
    """Which of :class:`Fault`'s fields an action takes and what it needs of where it
    runs: one row of :data:`TAKES`, the one table of it (the scenario's checks and
    :mod:`mqlab.faults.schedule` read it)."""

    duration_s: bool = False  # needs how long it lasts (the others take none)
    # accepted; used by the kills, crash_all and the power losses (restart_node and
    # pause_node accept it and do nothing with it); refused where the fault heals itself
    restart_after_s: bool = True
    partition: bool = False  # which hosts to cut apart
    netem: bool = False  # delay_ms, jitter_ms, loss_pct
    leader: bool = False  # aimed at the leader node: a broker without one (sqs) cannot
    between_hosts: bool = False  # needs a lab's hosts, on a self-hosted broker
    reboots: bool = False  # reboots broker hosts' kernels: hosts of their own (ssh, aws)


# every action a scenario's ``faults[].action`` may name (the fault log's vocabulary)
TAKES = {
    fl.KILL_NODE: Takes(),
    fl.KILL_LEADER: Takes(leader=True),
    fl.RESTART_NODE: Takes(),
    fl.PAUSE_NODE: Takes(duration_s=True),
    fl.CRASH_ALL: Takes(),
    fl.PARTITION: Takes(duration_s=True, restart_after_s=False, partition=True, between_hosts=True),
    fl.NETEM: Takes(duration_s=True, restart_after_s=False, netem=True, between_hosts=True),
    fl.POWER_LOSS: Takes(reboots=True),
    fl.POWER_LOSS_ALL: Takes(reboots=True),
}


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
    error_budget_s: float = spec(
        30.0,
        min=1,
        max=3600,
        help="a sender or receiver thread gives up after this long without one successful "
        "broker call; raise it for faults that leave the cluster without a leader longer",
    )
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
    sender_threads: int = spec(1, min=1, max=1000, help="senders per sender node")
    receiver_threads: int = spec(1, min=1, max=1000, help="receivers per receiver node")
    threads: int | None = spec(None, min=1, max=1000, help="sets sender and receiver threads")
    processes_per_node: int | None = spec(
        None,
        min=1,
        max=1000,
        help="worker processes a client node spreads its threads over evenly (not more "
        "load: a node runs its role's threads in all); lowered, per role, to the most "
        "that divide the role's threads; default: the node's cores, lowered likewise",
    )


@dataclass(frozen=True)
class Fault:
    at_s: float = spec(min=0, help="seconds after senders start")
    action: str = spec(choices=fl.FAULT_ACTIONS)
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
        choices=fl.PARTITION_KINDS,
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


def threads_in_all(clients: Clients, role: str) -> int:
    """The threads of ``role`` a run of ``clients`` has in total: nodes x threads (a
    node's threads are spread over its processes, whatever their number, so the answer
    does not depend on the machine)."""
    c = clients
    if role == "sender":
        return c.sender_nodes * c.sender_threads
    return c.receiver_nodes * c.receiver_threads
