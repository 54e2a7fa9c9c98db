"""What the orchestrator tells one worker process (written as JSON, read by the worker),
and how a role's worker processes are laid out over its client nodes.

A client node runs the role's threads (``clients.sender_threads`` /
``receiver_threads``): that many senders (receivers) per node, whatever its cores. They
are spread over one or more worker processes (``clients.processes_per_node``; the run
picks a number that divides the threads, ``mqlab.run.workers.client_processes``):
:func:`split` gives each process its share (as even as can be: the first processes one
more should the threads not divide). Those processes are the same senders in more
interpreters, not more load: a fixed rate is per sender thread, so a node offers
``threads x rate_per_s`` with any number of them.

The processes of a role are numbered node by node (``index``): node 0's processes first,
then node 1's. Sender ids and seeds derive from the node and that index, so they are
unique across every thread of every process of every node of the run, and with one
process per node they are what they always were (index = node):

- sender id of thread ``t`` of a process = ``node * T + (threads of the node's earlier
  processes) + t`` where T is the node's threads (``node * T + t`` with one process);
  the ids of a node are ``node * T .. node * T + T - 1`` however many processes share them;
- receiver index of thread ``t`` likewise, over the receivers;
- with ``workload.queues`` = N > 1 the run has N queues (:func:`queue_names`): sender id
  ``s`` sends to queue ``s % N`` and receiver index ``r`` receives from queue ``r % N``
  (:func:`queue_of`), so each sender writes to exactly one queue, and the queues a node's
  threads use do not depend on how many processes hold them;
- seed = ``1000 + index`` (senders) or ``2000 + index`` (receivers) while index < 1000;
  further indexes take the next free blocks of a thousand, alternating between the roles
  (senders 3000-3999, receivers 4000-4999, ...), so no two processes of a run share one.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

FORMAT_VERSION = 5  # 4: process, first_sender_id; 5: queues, first_receiver_index
ROLE_SEED_BLOCK = {"sender": 1, "receiver": 2}


@dataclass(frozen=True)
class WorkerSpec:
    run_id: str
    worker_id: str  # "sender-00", "receiver-01"
    role: str  # "sender" | "receiver"
    node: int
    threads: int
    broker: str
    settings: dict[str, Any]  # the profile's [settings], validated again by the worker
    endpoints: dict[str, Any]
    queues: list[str]  # every queue of the run (queue_names); a thread uses one
    workload: dict[str, Any]  # mqlab.scenario.Workload as a table
    out_dir: str
    seed: int
    host: str = "local"  # the inventory name of the host it runs on
    # receivers: sender id (as a string) -> µs to subtract from that sender's end-to-end
    # latencies: this host's clock offset minus the sender host's (both to the coordinator)
    clock_corrections_us: dict[str, int] = field(default_factory=dict)
    process: int = 0  # its index among the worker processes of its node
    first_sender_id: int = 0  # senders: thread t sends as first_sender_id + t
    first_receiver_index: int = 0  # receivers: thread t is receiver first_receiver_index + t
    # senders of a driver that sends in lanes: all in one thread (False: a thread per
    # sender, closed-loop ones each its own set of one, fixed-rate ones each sending a
    # batch at a time; bench/lanes.py and bench/fixedrate.py compare the two); receivers
    # of a driver that receives in lanes likewise (False: a thread per receiver)
    lanes: bool = True
    format_version: int = FORMAT_VERSION

    def write(self, path: Path) -> None:
        path.write_text(json.dumps(asdict(self), indent=1, sort_keys=True))

    @classmethod
    def read(cls, path: Path) -> WorkerSpec:
        data = json.loads(path.read_text())
        if data.get("format_version") != FORMAT_VERSION:
            raise ValueError(
                f"{path}: worker spec format_version {data.get('format_version')!r} "
                f"is not {FORMAT_VERSION}"
            )
        return cls(**data)


@dataclass(frozen=True)
class Process:
    """One worker process of a role: its node, its index on that node (``process``) and
    among all the role's processes of the run, node by node (``index``), its share of the
    node's threads (``threads``) and the id of its first thread among the role's
    (``first``: sender id or receiver index)."""

    node: int
    process: int
    index: int
    threads: int
    first: int

    def seed(self, role: str) -> int:
        block, rest = divmod(self.index, 1000)
        return (2 * block + ROLE_SEED_BLOCK[role]) * 1000 + rest


def split(threads: int, processes: int) -> list[int]:
    """``threads`` spread over ``processes`` (1 <= processes <= threads): as even as can
    be, the first processes one more (5 over 2: ``[3, 2]``)."""
    if not 1 <= processes <= threads:
        raise ValueError(f"{processes} worker processes for {threads} threads (1 to {threads})")
    each, extra = divmod(threads, processes)
    return [each + (p < extra) for p in range(processes)]


def processes(per_node: Sequence[int], threads: int) -> list[Process]:
    """Every worker process of a role whose node ``i`` runs ``per_node[i]`` of them,
    sharing that node's ``threads`` threads (:func:`split`)."""
    out: list[Process] = []
    for node, n in enumerate(per_node):
        if n < 1:
            raise ValueError(f"node {node}: {n} worker processes (at least 1)")
        first = node * threads
        for p, t in enumerate(split(threads, n)):
            out.append(Process(node, p, len(out), t, first))
            first += t
    return out


def queue_names(base: str, n: int) -> list[str]:
    """The names of a run's ``n`` queues: ``base`` itself for one (as runs always had),
    else ``base_q00``, ``base_q01``, ... (an underscore, not a hyphen: a plain identifier
    for every broker, PostgreSQL's tables included)."""
    if n < 1:
        raise ValueError(f"{n} queues (at least 1)")
    if n == 1:
        return [base]
    width = max(2, len(str(n - 1)))
    return [f"{base}_q{i:0{width}d}" for i in range(n)]


def queue_of(thread_id: int, n: int) -> int:
    """The queue (index) of sender id or receiver index ``thread_id`` among ``n`` queues."""
    return thread_id % n
