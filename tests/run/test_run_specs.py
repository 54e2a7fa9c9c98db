"""The worker processes a run starts (mqlab/run/workers.py ``client_processes``, ``worker_specs``):
how many per client node, their ids, sender ids and seeds, the receivers' clock
corrections by sender id. Expected values are written out by hand or computed here from
the documented scheme, not with the code under test."""

from __future__ import annotations

import dataclasses
import io
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from mqlab.errors import FleetError
from mqlab.hosts.base import Result
from mqlab.hosts.local import LocalHost
from mqlab.labs.placement import Placement
from mqlab.run import workers as run_mod
from mqlab.scenario.load import load_scenario
from mqlab.scenario.model import Scenario
from mqlab.workload.spec import WorkerSpec, processes, queue_names, split
from mqlab.workload.worker import Worker

ROOT = Path(__file__).resolve().parents[2]


class RemoteHost(LocalHost):
    """A host reached over SSH, as far as the run can tell: it answers ``nproc``."""

    is_local = False

    def __init__(self, name: str, cores: str):
        super().__init__(name, f"10.0.0.{len(name)}", Path("/srv/mqlab"))
        self.cores = cores
        self.asked: list[Any] = []

    def run(self, cmd, *, timeout_s=60.0, env=None, check=True):
        self.asked.append(cmd)
        return Result(0, self.cores + "\n", "")


def scenario(
    processes: int | None,
    senders: int = 2,
    receivers: int = 1,
    threads: int = 3,
    receiver_threads: int | None = None,
) -> Scenario:
    [s] = load_scenario(ROOT / "scenarios" / "redis-short.toml")
    clients = dataclasses.replace(
        s.clients,
        sender_nodes=senders,
        receiver_nodes=receivers,
        sender_threads=threads,
        receiver_threads=threads + 1 if receiver_threads is None else receiver_threads,
        processes_per_node=processes,
    )
    return dataclasses.replace(s, clients=clients)


def local() -> Placement:
    here = LocalHost()
    return Placement("local", "local", [here] * 3, [here], [here])


def specs(
    s: Scenario,
    placement: Placement,
    run_dir: Path,
    role: str,
    before: dict[str, Any] | None = None,
) -> list[WorkerSpec]:
    shape = run_mod.client_processes(s, placement)
    out = run_mod.worker_specs(s, "run-1", run_dir, placement, {}, ["q"], role, before or {}, shape)
    return [spec for spec, _host, _dir in out]


def sender_ids(spec: WorkerSpec) -> list[int]:
    """The ids the worker's threads send as (mqlab/workload/worker.py)."""
    return [spec.first_sender_id + t for t in range(spec.threads)]


def test_one_process_per_node_gives_the_specs_runs_always_had(tmp_path: Path) -> None:
    s = scenario(1, senders=3, receivers=2, threads=3)
    senders = specs(s, local(), tmp_path, "sender")
    receivers = specs(s, local(), tmp_path, "receiver")
    workers = tmp_path.resolve() / "workers"
    # before processes per node: id role-NN, node NN, seed 1000 + NN (senders) or
    # 2000 + NN (receivers), sender id node * threads + thread
    assert [(x.worker_id, x.node, x.process, x.threads, x.seed, x.out_dir) for x in senders] == [
        ("sender-00", 0, 0, 3, 1000, str(workers / "sender-00")),
        ("sender-01", 1, 0, 3, 1001, str(workers / "sender-01")),
        ("sender-02", 2, 0, 3, 1002, str(workers / "sender-02")),
    ]
    assert [sender_ids(x) for x in senders] == [[0, 1, 2], [3, 4, 5], [6, 7, 8]]
    assert [(x.worker_id, x.node, x.threads, x.seed) for x in receivers] == [
        ("receiver-00", 0, 4, 2000),
        ("receiver-01", 1, 4, 2001),
    ]


# sender ids by hand from the documented scheme (mqlab/workload/spec.py): a node's T
# threads keep ids node * T .. node * T + T - 1, split evenly over its processes (the
# most, up to processes_per_node, that divide T)
@pytest.mark.parametrize(
    ("nodes", "processes", "threads", "expected"),
    [
        (1, 2, 2, {(0, 0): [0], (0, 1): [1]}),
        (2, 2, 4, {(0, 0): [0, 1], (0, 1): [2, 3], (1, 0): [4, 5], (1, 1): [6, 7]}),
        (
            3,
            2,
            6,
            {
                (0, 0): [0, 1, 2],
                (0, 1): [3, 4, 5],
                (1, 0): [6, 7, 8],
                (1, 1): [9, 10, 11],
                (2, 0): [12, 13, 14],
                (2, 1): [15, 16, 17],
            },
        ),
        (1, 3, 9, {(0, 0): [0, 1, 2], (0, 1): [3, 4, 5], (0, 2): [6, 7, 8]}),
        # 3 processes cannot share 4 threads evenly: 2 of 2
        (1, 3, 4, {(0, 0): [0, 1], (0, 1): [2, 3]}),
        # nor 2 processes 3 threads: one process of 3
        (2, 2, 3, {(0, 0): [0, 1, 2], (1, 0): [3, 4, 5]}),
    ],
)
def test_a_nodes_threads_are_spread_over_its_processes_with_unique_ids(
    tmp_path: Path, nodes: int, processes: int, threads: int, expected: dict[Any, list[int]]
) -> None:
    s = scenario(processes, senders=nodes, receivers=nodes, threads=threads)
    senders = specs(s, local(), tmp_path, "sender")
    assert {(x.node, x.process): sender_ids(x) for x in senders} == expected
    every = [sid for x in senders for sid in sender_ids(x)]
    assert sorted(every) == list(range(nodes * threads))  # the node's threads, each id once
    # the processes add no sender, and each has the same share of its node's
    assert sum(x.threads for x in senders) == nodes * threads
    assert len({x.threads for x in senders}) == 1


@pytest.mark.parametrize(
    ("threads", "at_most", "processes"),
    [(8, 6, 4), (2, 16, 2), (5, 2, 1), (7, 4, 1), (12, 5, 4), (1, 1, 1), (100, 8, 5), (6, 6, 6)],
)
def test_the_processes_are_the_most_that_divide_the_threads(
    threads: int, at_most: int, processes: int
) -> None:
    assert run_mod.dividing(threads, at_most) == processes


@pytest.mark.parametrize(
    ("processes", "shape"),
    # 2 sender threads, 3 receiver threads per node
    [(1, (1, 1)), (2, (2, 1)), (3, (2, 3)), (7, (2, 3))],
)
def test_more_processes_than_threads_are_lowered_to_the_threads(
    tmp_path: Path, processes: int, shape: tuple[int, int]
) -> None:
    s = scenario(processes, senders=2, receivers=1, threads=2)
    shape_ = run_mod.client_processes(s, local())
    assert shape_ == {"sender": [shape[0]] * 2, "receiver": [shape[1]]}
    senders = specs(s, local(), tmp_path, "sender")
    receivers = specs(s, local(), tmp_path, "receiver")
    assert all(x.threads >= 1 for x in senders + receivers)
    assert sorted(sid for x in senders for sid in sender_ids(x)) == [0, 1, 2, 3]
    assert sorted(r for x in receivers for r in receiver_indexes(x)) == [0, 1, 2]


def test_worker_ids_name_node_and_process_and_sort(tmp_path: Path) -> None:
    s = scenario(2, senders=2, receivers=1, threads=2, receiver_threads=4)
    senders = specs(s, local(), tmp_path, "sender")
    receivers = specs(s, local(), tmp_path, "receiver")
    ids = [x.worker_id for x in senders]
    assert ids == ["sender-00-p00", "sender-00-p01", "sender-01-p00", "sender-01-p01"]
    assert sorted(ids) == ids
    assert [x.worker_id for x in receivers] == ["receiver-00-p00", "receiver-00-p01"]
    assert len({x.out_dir for x in senders + receivers}) == 6  # a folder each
    assert [(x.node, x.process) for x in senders] == [(0, 0), (0, 1), (1, 0), (1, 1)]
    twelve = scenario(12, senders=1, threads=12)
    twelve = [x.worker_id for x in specs(twelve, local(), tmp_path, "sender")]
    assert twelve[:3] == ["sender-00-p00", "sender-00-p01", "sender-00-p02"]
    assert sorted(twelve) == twelve and twelve[-1] == "sender-00-p11"


def test_seeds_differ_for_every_process_and_thread_of_both_roles(tmp_path: Path) -> None:
    s = scenario(3, senders=2, receivers=2, threads=6, receiver_threads=3)
    everyone = specs(s, local(), tmp_path, "sender") + specs(s, local(), tmp_path, "receiver")
    seeds = [x.seed for x in everyone]
    assert len(set(seeds)) == len(seeds) == 12
    assert [x.seed for x in everyone[:6]] == [1000, 1001, 1002, 1003, 1004, 1005]
    thread_seeds = [x.seed * 1000 + t for x in everyone for t in range(x.threads)]
    assert len(set(thread_seeds)) == len(thread_seeds)
    # past a thousand processes of a role the blocks alternate: never a shared seed
    # 700 threads each: 700 processes
    big = scenario(700, senders=2, receivers=2, threads=700, receiver_threads=700)
    many = specs(big, local(), tmp_path, "sender") + specs(big, local(), tmp_path, "receiver")
    assert len({x.seed for x in many}) == len(many) == 2800
    assert many[1000].seed == 3000 and many[1400 + 1000].seed == 4000


@pytest.mark.parametrize(
    ("cores", "shape"),
    # 3 sender threads, 4 receiver threads: the most processes up to the cores that
    # divide them
    [(1, (1, 1)), (2, (1, 2)), (3, (3, 2)), (4, (3, 4)), (16, (3, 4))],
)
def test_the_default_is_the_cores_of_each_node_host_dividing_its_threads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cores: int, shape: tuple[int, int]
) -> None:
    monkeypatch.setattr(run_mod.os, "cpu_count", lambda: cores)
    s = scenario(None, senders=2, receivers=1)
    assert run_mod.client_processes(s, local()) == {
        "sender": [shape[0]] * 2,
        "receiver": [shape[1]],
    }


def test_the_default_asks_each_remote_host_once(tmp_path: Path) -> None:
    big, small = RemoteHost("sender-0", "8"), RemoteHost("sender-1", "2")
    recv = RemoteHost("receiver-0", "4")
    lab = Placement("ssh", "lab", [], [big, small], [recv])
    # 10 sender threads, 12 receiver threads; node 2 on sender-0 again
    s3 = scenario(None, senders=3, receivers=2, threads=10, receiver_threads=12)
    assert run_mod.client_processes(s3, lab) == {"sender": [5, 2, 5], "receiver": [4, 4]}
    assert big.asked == [["nproc"]] and small.asked == [["nproc"]] and recv.asked == [["nproc"]]
    # the scenario's value wins, and no host is asked
    fixed = RemoteHost("sender-0", "8")
    lab2 = Placement("ssh", "lab", [], [fixed], [fixed])
    # 3 sender threads: 3 processes; 4 receiver threads: 2 (3 do not divide them)
    assert run_mod.client_processes(scenario(3), lab2) == {"sender": [3, 3], "receiver": [2]}
    assert fixed.asked == []
    # processes per node differing between nodes: sender ids still unique, node by node,
    # each node's 10 threads whatever its processes
    senders = specs(s3, lab, tmp_path, "sender")
    assert [(x.worker_id, x.host) for x in senders[5:8]] == [
        ("sender-01-p00", "sender-1"),
        ("sender-01-p01", "sender-1"),
        ("sender-02-p00", "sender-0"),
    ]
    assert [sender_ids(x) for x in senders[5:7]] == [[10, 11, 12, 13, 14], [15, 16, 17, 18, 19]]
    assert [x.threads for x in senders[:5]] == [2] * 5  # 10 over 5
    every = [sid for x in senders for sid in sender_ids(x)]
    assert sorted(every) == list(range(3 * 10))


@pytest.mark.parametrize("cores", [1, 2, 4, 16, 64])
def test_a_fixed_rate_node_offers_its_threads_times_the_rate_whatever_the_cores(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cores: int
) -> None:
    # 1 sender node x 2 threads x 150 msgs/s, processes left out: 300 msgs/s as written
    monkeypatch.setattr(run_mod.os, "cpu_count", lambda: cores)
    s = scenario(None, senders=1, receivers=1, threads=2)
    s = dataclasses.replace(
        s, workload=dataclasses.replace(s.workload, mode="fixed_rate", rate_per_s=150.0)
    )
    senders = specs(s, local(), tmp_path, "sender")
    assert len(senders) == min(cores, 2)
    # each sender thread paces itself at the spec's rate_per_s (mqlab/workload/worker.py)
    offered = sum(x.threads * x.workload["rate_per_s"] for x in senders)
    assert offered == 300.0
    assert sorted(sid for x in senders for sid in sender_ids(x)) == [0, 1]


def test_a_host_that_does_not_answer_a_number_fails_the_run_in_one_line() -> None:
    bad = RemoteHost("sender-0", "nproc: command not found")
    lab = Placement("ssh", "lab", [], [bad], [bad])
    with pytest.raises(FleetError, match=r"^sender-0: nproc answered 'nproc: command not found'"):
        run_mod.client_processes(scenario(None), lab)


def test_receivers_correct_each_sender_id_by_its_process_host(tmp_path: Path) -> None:
    a, b = RemoteHost("sender-0", "2"), RemoteHost("sender-1", "2")
    r = RemoteHost("receiver-0", "2")
    lab = Placement("ssh", "lab", [], [a, b], [r])
    before = {
        "sender-0": SimpleNamespace(offset_ms=1.0),
        "sender-1": SimpleNamespace(offset_ms=-2.0),
        "receiver-0": SimpleNamespace(offset_ms=0.5),
    }
    s = scenario(2, senders=2, receivers=1, threads=2, receiver_threads=2)
    [first, second] = specs(s, lab, tmp_path, "receiver", before)
    # sender ids 0-1: node 0's two threads (a process each, on sender-0), 2-3: node 1's
    expected = {str(i): -500 for i in range(2)} | {str(i): 2500 for i in range(2, 4)}
    assert first.clock_corrections_us == second.clock_corrections_us == expected


# -- workload.queues: which queue each thread uses -------------------------------------
def test_queue_names_keep_the_single_name_and_number_the_rest() -> None:
    assert queue_names("mqlab_x_1", 1) == ["mqlab_x_1"]
    assert queue_names("mqlab_x_1", 3) == ["mqlab_x_1_q00", "mqlab_x_1_q01", "mqlab_x_1_q02"]
    many = queue_names("b", 101)
    assert (many[0], many[99], many[100]) == ("b_q000", "b_q099", "b_q100")
    assert sorted(many) == many and len(set(many)) == 101
    with pytest.raises(ValueError):
        queue_names("b", 0)


def receiver_indexes(spec: WorkerSpec) -> list[int]:
    """The indexes the worker's receiver threads have (mqlab/workload/worker.py)."""
    return [spec.first_receiver_index + t for t in range(spec.threads)]


@pytest.mark.parametrize(
    ("nodes", "processes", "threads", "expected"),
    [
        # scenario(): receiver threads = threads + 1
        (1, 1, 3, {(0, 0): [0, 1, 2, 3]}),
        (2, 2, 3, {(0, 0): [0, 1], (0, 1): [2, 3], (1, 0): [4, 5], (1, 1): [6, 7]}),
        (3, 2, 1, {(0, 0): [0], (0, 1): [1], (1, 0): [2], (1, 1): [3], (2, 0): [4], (2, 1): [5]}),
        (1, 2, 5, {(0, 0): [0, 1, 2], (0, 1): [3, 4, 5]}),
        (1, 2, 4, {(0, 0): [0, 1, 2, 3, 4]}),  # 5 receivers: 1 process (2 do not divide)
    ],
)
def test_receiver_indexes_number_every_receiver_thread_once(
    tmp_path: Path, nodes: int, processes: int, threads: int, expected: dict[Any, list[int]]
) -> None:
    s = scenario(processes, senders=1, receivers=nodes, threads=threads)
    receivers = specs(s, local(), tmp_path, "receiver")
    assert {(x.node, x.process): receiver_indexes(x) for x in receivers} == expected
    senders = specs(s, local(), tmp_path, "sender")
    assert all(x.first_receiver_index == 0 for x in senders)


ENDPOINTS = {"broker": "redis", "nodes": [{"index": 0, "host": "127.0.0.1", "port": 1}]}


def worker_of(spec: WorkerSpec) -> Worker:
    """A worker process as ``python -m mqlab.workload.worker`` builds it (no server needed:
    the driver connects only when a thread asks for a client)."""
    Path(spec.out_dir).mkdir(parents=True, exist_ok=True)
    w = Worker(spec, io.StringIO(), io.StringIO())
    w.recorder.close()
    return w


def test_threads_spread_over_the_queues_round_robin_by_global_id(tmp_path: Path) -> None:
    # 2 sender nodes x 6 threads (2 processes each) = 12 senders, 1 receiver node x 7
    # threads = 7 receivers, 5 queues: sender s -> queue s % 5, receiver r -> queue r % 5
    s = scenario(2, senders=2, receivers=1, threads=6)
    s = dataclasses.replace(s, workload=dataclasses.replace(s.workload, queues=5))
    names = [f"q{i}" for i in range(5)]
    shape = run_mod.client_processes(s, local())
    used: dict[str, dict[str, list[int]]] = {"sender": {}, "receiver": {}}
    for role in ("sender", "receiver"):
        out = run_mod.worker_specs(s, "r", tmp_path, local(), ENDPOINTS, names, role, {}, shape)
        for spec, _host, _dir in out:
            assert spec.queues == names
            w = worker_of(spec)
            ids = sender_ids(spec) if role == "sender" else receiver_indexes(spec)
            for thread, (gid, queue) in enumerate(zip(ids, w.thread_queues, strict=True)):
                used[role].setdefault(queue, []).append(gid)
                # the thread's driver is the one of its queue
                assert w.drivers[queue].queue == queue, (spec.worker_id, thread)
            assert sorted(w.drivers) == sorted(set(w.thread_queues))
    assert used["sender"] == {
        "q0": [0, 5, 10],
        "q1": [1, 6, 11],
        "q2": [2, 7],
        "q3": [3, 8],
        "q4": [4, 9],
    }
    assert used["receiver"] == {"q0": [0, 5], "q1": [1, 6], "q2": [2], "q3": [3], "q4": [4]}


def test_one_queue_gives_every_thread_the_runs_queue(tmp_path: Path) -> None:
    s = scenario(2, senders=2, receivers=1, threads=2)
    for role in ("sender", "receiver"):
        for spec in specs(s, local(), tmp_path, role):
            assert spec.queues == ["q"]
            spec = dataclasses.replace(spec, endpoints=ENDPOINTS)
            assert set(worker_of(spec).thread_queues) == {"q"}


# -- mqlab.workload.spec.split / processes, by hand ------------------------------------
@pytest.mark.parametrize(
    ("threads", "processes", "shares"),
    [(1, 1, [1]), (5, 2, [3, 2]), (4, 4, [1, 1, 1, 1]), (10, 3, [4, 3, 3]), (8, 2, [4, 4])],
)
def test_split_spreads_threads_as_evenly_as_can_be(
    threads: int, processes: int, shares: list[int]
) -> None:
    assert split(threads, processes) == shares


@pytest.mark.parametrize(("threads", "processes"), [(2, 3), (1, 0), (3, -1)])
def test_split_refuses_a_process_without_a_thread(threads: int, processes: int) -> None:
    with pytest.raises(ValueError, match="worker processes for"):
        split(threads, processes)


def test_processes_number_node_by_node_and_one_per_node_is_the_old_layout() -> None:
    # 3 nodes of 4 threads, one process each: first id node * 4, index = node
    assert [(p.node, p.process, p.index, p.threads, p.first) for p in processes([1, 1, 1], 4)] == [
        (0, 0, 0, 4, 0),
        (1, 0, 1, 4, 4),
        (2, 0, 2, 4, 8),
    ]
    # nodes with 2 and 3 processes sharing 5 threads each
    assert [(p.node, p.process, p.index, p.threads, p.first) for p in processes([2, 3], 5)] == [
        (0, 0, 0, 3, 0),
        (0, 1, 1, 2, 3),
        (1, 0, 2, 2, 5),
        (1, 1, 3, 2, 7),
        (1, 2, 4, 1, 9),
    ]
