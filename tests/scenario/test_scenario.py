"""Scenario parsing, profiles, sweeps and the one-line errors for bad input."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

import mqlab.cli.checks  # noqa: F401 - registers the checks from above (AWS, published sets)
from mqlab.cli import main
from mqlab.errors import ScenarioError
from mqlab.scenario.load import load_scenario, to_toml

PROFILE = """
format_version = 1
broker = "nats"
description = "test profile"
[settings]
replicas = 3
ack_wait_s = 5.0
"""

BASE = """
name = "t"
profile = "p3"
[cluster]
nodes = 3
[workload]
message_bytes = 100
messages_per_thread = 10
[clients]
sender_nodes = 1
receiver_nodes = 2
threads = 2
"""


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    (tmp_path / "profiles").mkdir()
    (tmp_path / "profiles" / "p3.toml").write_text(PROFILE)
    (tmp_path / "profiles" / "p1.toml").write_text(PROFILE.replace("replicas = 3", "replicas = 1"))
    return tmp_path


def write(folder: Path, text: str) -> Path:
    p = folder / "s.toml"
    p.write_text(text)
    return p


def test_minimal_scenario_loads_with_profile_and_threads_shorthand(folder: Path) -> None:
    [s] = load_scenario(write(folder, BASE))
    assert s.broker == "nats" and s.profile.name == "p3"
    assert s.profile.settings.replicas == 3 and s.profile.settings.ack_wait_s == 5.0
    assert (s.clients.sender_threads, s.clients.receiver_threads) == (2, 2)
    assert s.workload.send_batch_max == 10 and s.workload.message_bytes == 100
    assert s.label == "p3_2t-1s-2r"


def test_list_values_expand_to_the_cartesian_product(folder: Path) -> None:
    text = BASE.replace("threads = 2", "threads = [1, 5, 25]").replace(
        "message_bytes = 100", "message_bytes = [100, 1000]"
    )
    runs = load_scenario(write(folder, text))
    assert len(runs) == 6
    assert {(s.clients.sender_threads, s.workload.message_bytes) for s in runs} == {
        (t, m) for t in (1, 5, 25) for m in (100, 1000)
    }
    assert all(s.clients.receiver_threads == s.clients.sender_threads for s in runs)
    assert "message_bytes-1000" in runs[-1].label


def test_sweep_zip_links_lists_and_profiles_sweep(folder: Path) -> None:
    text = (
        BASE.replace('profile = "p3"', 'profile = ["p3", "p1"]')
        + """
[sweep.zip]
"clients.sender_nodes" = [1, 2, 4]
"clients.receiver_nodes" = [2, 4, 8]
"""
    )
    runs = load_scenario(write(folder, text))
    assert len(runs) == 6
    assert {(s.clients.sender_nodes, s.clients.receiver_nodes) for s in runs} == {
        (1, 2),
        (2, 4),
        (4, 8),
    }
    assert {s.profile.name for s in runs} == {"p1", "p3"}


def test_resolved_scenario_round_trips_through_toml(folder: Path) -> None:
    [s] = load_scenario(write(folder, BASE))
    text = to_toml(s)
    import tomllib

    doc = tomllib.loads(text)
    assert doc["resolved_profile"]["settings"]["replicas"] == 3
    assert doc["clients"]["sender_threads"] == 2 and "threads" not in doc["clients"]


def test_processes_per_node_defaults_to_the_cores_and_round_trips(folder: Path) -> None:
    import tomllib

    [s] = load_scenario(write(folder, BASE))
    assert s.clients.processes_per_node is None  # the run resolves it: each node's cores
    assert "processes_per_node" not in tomllib.loads(to_toml(s))["clients"]
    [s] = load_scenario(write(folder, BASE + "processes_per_node = 4\n"))
    assert s.clients.processes_per_node == 4
    assert (s.clients.sender_threads, s.clients.receiver_threads) == (2, 2)  # per node
    again = write(folder, to_toml(s).split("\n[resolved_profile]")[0] + "\n")
    [back] = load_scenario(again)
    assert back.clients == s.clients
    runs = load_scenario(write(folder, BASE + "processes_per_node = [1, 2]\n"))
    assert [r.clients.processes_per_node for r in runs] == [1, 2]
    assert runs[1].label == "p3_2t-1s-2r_processes_per_node-2"


@pytest.mark.parametrize(
    ("value", "words"),
    [
        ("0", "0 is too small (must be >= 1)"),
        ("-3", "-3 is too small (must be >= 1)"),
        ("1.5", "expected"),
        ('"all"', "expected"),
    ],
)
def test_processes_per_node_below_one_is_refused_in_one_line(
    folder: Path, value: str, words: str
) -> None:
    text = BASE + f"processes_per_node = {value}\n"
    _refused_in_one_line(folder, text, "clients.processes_per_node", words)


@pytest.mark.parametrize(
    ("edit", "key", "words"),
    [
        (("[workload]", "[workload]\nbogus = 1"), "workload.bogus", "unknown key"),
        (("threads = 2", "threads = 0"), "clients.threads", "too small"),
        (("message_bytes = 100", "message_bytes = -5"), "workload.message_bytes", "too small"),
        (
            ("message_bytes = 100", 'message_bytes = "big"'),
            "workload.message_bytes",
            "expected an integer",
        ),
        (
            ("[workload]", "[workload]\nsend_batch_min = 5\nsend_batch_max = 2"),
            "workload.send_batch_min",
            "greater than send_batch_max",
        ),
        (('profile = "p3"', 'profile = "nope"'), "profile", "unknown profile"),
        (("nodes = 3", "nodes = 2"), "cluster.nodes", "cannot hold 3 replicas"),
        (
            ("messages_per_thread = 10", "messages_per_thread = 10\nduration_s = 5"),
            "workload.messages_per_thread",
            "exactly one",
        ),
        (("[cluster]", '[cluster]\ntarget = "moon"'), "cluster.target", "not allowed"),
        (('name = "t"', 'name = "t"\ncolour = 1'), "colour", "unknown key"),
    ],
)
def test_bad_values_name_file_key_and_fix(
    folder: Path, edit: tuple[str, str], key: str, words: str
) -> None:
    path = write(folder, BASE.replace(*edit, 1))
    with pytest.raises(ScenarioError) as info:
        load_scenario(path)
    text = str(info.value)
    assert text.startswith(str(path)) and key in text and words in text
    assert "\n" not in text


def test_unknown_broker_in_profile(folder: Path) -> None:
    (folder / "profiles" / "p3.toml").write_text(PROFILE.replace('"nats"', '"carrierpigeon"'))
    with pytest.raises(ScenarioError, match="broker.*unknown broker 'carrierpigeon'"):
        load_scenario(write(folder, BASE))


def test_unknown_settings_key_in_profile_names_the_profile_file(folder: Path) -> None:
    (folder / "profiles" / "p3.toml").write_text(PROFILE + "fsync_everything = true\n")
    with pytest.raises(ScenarioError) as info:
        load_scenario(write(folder, BASE))
    assert "p3.toml" in str(info.value) and "settings.fsync_everything" in str(info.value)


@pytest.mark.parametrize("content", ["name = ", None])
def test_cli_validate_reports_syntax_errors_and_missing_files_in_one_line(
    folder: Path, content: str | None
) -> None:
    path = folder / "broken.toml"
    if content is not None:
        path.write_text(content)
    result = CliRunner().invoke(main, ["validate", str(path)])
    assert result.exit_code == 2
    lines = [x for x in result.output.splitlines() if x.strip()]
    assert len(lines) == 1 and lines[0].startswith("mqlab: error: ") and str(path) in lines[0]
    assert "Traceback" not in result.output


def test_reference_names_a_published_experiment_and_is_archived(folder: Path) -> None:
    text = BASE + '[reference]\nset = "mqperf-2021"\nexperiment = "1-partition"\n'
    [s] = load_scenario(write(folder, text))
    assert s.reference is not None
    assert (s.reference.set, s.reference.experiment) == ("mqperf-2021", "1-partition")
    import tomllib

    assert tomllib.loads(to_toml(s))["reference"] == {
        "set": "mqperf-2021",
        "experiment": "1-partition",
    }
    [plain] = load_scenario(write(folder, BASE))
    assert plain.reference is None and "reference" not in tomllib.loads(to_toml(plain))


@pytest.mark.parametrize(
    ("table", "key", "words"),
    [
        ('set = "mqperf-1999"\nexperiment = "main"', "reference.set", "unknown published"),
        ('set = "mqperf-2021"\nexperiment = "big"', "reference.experiment", "no experiment 'big'"),
        ('set = "mqperf-2021"', "reference.experiment", "missing"),
    ],
)
def test_bad_references_name_file_key_and_fix(
    folder: Path, table: str, key: str, words: str
) -> None:
    _refused_in_one_line(folder, BASE + f"[reference]\n{table}\n", key, words)


def test_cli_validate_lists_sweep_points(folder: Path) -> None:
    path = write(folder, BASE.replace("threads = 2", "threads = [1, 2]"))
    result = CliRunner().invoke(main, ["validate", str(path)])
    assert result.exit_code == 0, result.output
    assert "2 run(s)" in result.output and "t_p3_1t-1s-2r" in result.output


def test_project_scenarios_all_validate() -> None:
    root = Path(__file__).resolve().parents[2] / "scenarios"
    files = [p for p in root.rglob("*.toml") if "profiles" not in p.relative_to(root).parts]
    assert len(files) > 20
    for p in files:
        assert load_scenario(p), p


@pytest.mark.parametrize(
    ("fault", "key", "words"),
    [
        ('action = "pause_node"\nnode = 1', "faults[0].duration_s", "needs how long"),
        ('action = "kill_node"\nduration_s = 3', "faults[0].duration_s", "takes no duration_s"),
        ('action = "freeze_time"', "faults[0].action", "not allowed"),
        ('action = "pause_node"\nnode = 3\nduration_s = 1', "faults[0].node", "does not exist"),
    ],
)
def test_bad_faults_name_file_key_and_fix(folder: Path, fault: str, key: str, words: str) -> None:
    path = write(folder, BASE + f"[[faults]]\nat_s = 2\n{fault}\n")
    with pytest.raises(ScenarioError) as info:
        load_scenario(path)
    text = str(info.value)
    assert text.startswith(str(path)) and key in text and words in text, text
    assert "\n" not in text


def test_pause_and_crash_all_faults_load_and_round_trip(folder: Path) -> None:
    text = BASE + (
        '[[faults]]\nat_s = 2\naction = "pause_node"\nnode = 1\nduration_s = 3\n'
        '[[faults]]\nat_s = 6\naction = "crash_all"\nrestart_after_s = 1\n'
    )
    [s] = load_scenario(write(folder, text))
    assert [(f.action, f.node, f.duration_s, f.restart_after_s) for f in s.faults] == [
        ("pause_node", 1, 3.0, None),
        ("crash_all", 0, None, 1.0),
    ]
    import tomllib

    archived = tomllib.loads(to_toml(s))["faults"]  # the scenario as run, in the archive
    assert [(f["action"], f.get("duration_s"), f.get("restart_after_s")) for f in archived] == [
        ("pause_node", 3.0, None),
        ("crash_all", None, 1.0),
    ]


def test_kill_leader_on_a_broker_without_leaders_is_refused(folder: Path) -> None:
    (folder / "profiles" / "q.toml").write_text(
        'format_version = 1\nbroker = "sqs"\ndescription = "x"\n[settings]\n'
    )
    text = BASE.replace('profile = "p3"', 'profile = "q"').replace("nodes = 3", "nodes = 1")
    path = write(folder, text + '[[faults]]\nat_s = 1\naction = "kill_leader"\n')
    with pytest.raises(ScenarioError, match=r"faults\[0\].action.*sqs has no leader"):
        load_scenario(path)


LAB = BASE.replace("nodes = 3", 'nodes = 3\ntarget = "netns"')


def _refused_in_one_line(folder: Path, text: str, key: str, words: str) -> None:
    """The scenario ``text`` is refused with one line naming the file, ``key`` and what."""
    path = write(folder, text)
    with pytest.raises(ScenarioError) as info:
        load_scenario(path)
    message = str(info.value)
    assert message.startswith(f"{path}: {key}: ") and words in message, message
    assert "\n" not in message


@pytest.mark.parametrize(
    ("base", "fault", "key", "words"),
    [
        (
            BASE,
            'action = "partition"\npartition = "node_from_brokers"\nnode = 1\nduration_s = 4',
            "faults[0].action",
            "every node of a local cluster is on this machine "
            '(run on a lab: cluster.target = "netns")',
        ),
        (LAB, 'action = "partition"\nduration_s = 4', "faults[0].partition", "needs which hosts"),
        (
            LAB,
            'action = "partition"\npartition = "clients_from_leader"',
            "faults[0].duration_s",
            "how long it lasts before it heals",
        ),
        (
            LAB,
            'action = "partition"\npartition = "everyone"\nduration_s = 4',
            "faults[0].partition",
            "'everyone' is not allowed (one of: node_from_brokers, leader_from_brokers, "
            "clients_from_leader, majority_minority)",
        ),
        (
            LAB,
            'action = "partition"\npartition = "majority_minority"\nnode = 3\nduration_s = 4',
            "faults[0].node",
            "node 3 does not exist",
        ),
        (
            LAB,
            'action = "partition"\npartition = "node_from_brokers"\nduration_s = 4\n'
            "restart_after_s = 1",
            "faults[0].restart_after_s",
            "partition takes no restart_after_s",
        ),
        (
            LAB,
            'action = "pause_node"\npartition = "node_from_brokers"\nduration_s = 4',
            "faults[0].partition",
            "pause_node takes no partition",
        ),
    ],
)
def test_bad_partitions_name_file_key_and_fix(
    folder: Path, base: str, fault: str, key: str, words: str
) -> None:
    _refused_in_one_line(folder, base + f"[[faults]]\nat_s = 2\n{fault}\n", key, words)


def test_partitions_on_a_lab_load_and_round_trip(folder: Path) -> None:
    text = LAB + (
        '[[faults]]\nat_s = 2\naction = "partition"\npartition = "node_from_brokers"\n'
        "node = 1\nduration_s = 4\n"
        '[[faults]]\nat_s = 8\naction = "partition"\npartition = "clients_from_leader"\n'
        "duration_s = 2.5\n"
    )
    [s] = load_scenario(write(folder, text))
    assert [(f.action, f.partition, f.node, f.duration_s) for f in s.faults] == [
        ("partition", "node_from_brokers", 1, 4.0),
        ("partition", "clients_from_leader", 0, 2.5),
    ]
    import tomllib

    archived = tomllib.loads(to_toml(s))["faults"]
    assert [(f["partition"], f["duration_s"]) for f in archived] == [
        ("node_from_brokers", 4.0),
        ("clients_from_leader", 2.5),
    ]


def test_a_partition_between_brokers_needs_two_of_them(folder: Path) -> None:
    (folder / "profiles" / "p1.toml").write_text(PROFILE.replace("replicas = 3", "replicas = 1"))
    text = LAB.replace('profile = "p3"', 'profile = "p1"').replace("nodes = 3", "nodes = 1")
    fault = '[[faults]]\nat_s = 2\naction = "partition"\npartition = "{}"\nduration_s = 4\n'
    with pytest.raises(ScenarioError) as info:
        load_scenario(write(folder, text + fault.format("node_from_brokers")))
    assert str(info.value).endswith(
        ": faults[0].partition: node_from_brokers needs other brokers to cut node 0 from "
        '(nodes = 1) (use nodes >= 2, or partition = "clients_from_leader")'
    )
    [s] = load_scenario(write(folder, text + fault.format("clients_from_leader")))
    assert s.faults[0].partition == "clients_from_leader"


def test_partitions_take_turns(folder: Path) -> None:
    def partition(at: float, length: float) -> str:
        return (
            f'[[faults]]\nat_s = {at}\naction = "partition"\npartition = "node_from_brokers"\n'
            f"duration_s = {length}\n"
        )

    # listed out of order, and a kill in between: only the partitions' times count
    kill = '[[faults]]\nat_s = 3\naction = "kill_node"\n'
    text = LAB + partition(6, 2) + kill + partition(2, 4.5)
    path = write(folder, text)
    with pytest.raises(ScenarioError) as info:
        load_scenario(path)
    assert str(info.value) == (
        f"{path}: faults[0].at_s: this partition starts at 6 s, before the one of faults[2] "
        "heals (6.5 s) (start it at 6.5 s or later: one partition at a time)"
    )
    back_to_back = LAB + partition(2, 4) + partition(6, 2)
    assert len(load_scenario(write(folder, back_to_back))[0].faults) == 2


@pytest.mark.parametrize(
    ("base", "fault", "key", "words"),
    [
        (
            BASE,
            'action = "netem"\ndelay_ms = 50\nduration_s = 4',
            "faults[0].action",
            "every node of a local cluster is on this machine",
        ),
        (LAB, 'action = "netem"\nduration_s = 4', "faults[0].delay_ms", "a delay or a loss"),
        (
            LAB,
            'action = "netem"\njitter_ms = 5\nloss_pct = 1\nduration_s = 4',
            "faults[0].jitter_ms",
            "jitter varies a delay",
        ),
        (LAB, 'action = "netem"\nloss_pct = 1', "faults[0].duration_s", "before the link heals"),
        (
            LAB,
            'action = "netem"\nloss_pct = 1\nduration_s = 4\nrestart_after_s = 1',
            "faults[0].restart_after_s",
            "netem takes no restart_after_s",
        ),
        (
            LAB,
            'action = "kill_node"\nloss_pct = 1',
            "faults[0].loss_pct",
            "kill_node takes no loss_pct",
        ),
        (LAB, 'action = "netem"\nloss_pct = 101\nduration_s = 4', "faults[0].loss_pct", "100"),
        (
            LAB,
            'action = "netem"\nnode = 1\nloss_pct = 1\nduration_s = 4\n'
            '[[faults]]\nat_s = 5\naction = "netem"\nnode = 1\ndelay_ms = 9\nduration_s = 1',
            "faults[1].at_s",
            "one netem per node at a time",
        ),
    ],
)
def test_bad_netem_faults_name_file_key_and_fix(
    folder: Path, base: str, fault: str, key: str, words: str
) -> None:
    _refused_in_one_line(folder, base + f"[[faults]]\nat_s = 2\n{fault}\n", key, words)


def test_netem_on_a_lab_loads_and_round_trips(folder: Path) -> None:
    text = LAB + (
        '[[faults]]\nat_s = 2\naction = "netem"\nnode = 2\ndelay_ms = 50\njitter_ms = 10\n'
        "loss_pct = 2\nduration_s = 4\n"
        '[[faults]]\nat_s = 4\naction = "netem"\nnode = 1\nloss_pct = 5\nduration_s = 1\n'
    )
    [s] = load_scenario(write(folder, text))
    got = [(f.node, f.delay_ms, f.jitter_ms, f.loss_pct, f.duration_s) for f in s.faults]
    assert got == [(2, 50.0, 10.0, 2.0, 4.0), (1, None, None, 5.0, 1.0)]
    import tomllib

    archived = tomllib.loads(to_toml(s))["faults"]
    assert archived[1] == {
        "at_s": 4.0,
        "action": "netem",
        "node": 1,
        "duration_s": 1.0,
        "loss_pct": 5.0,
    }


@pytest.mark.parametrize(("base", "target"), [(BASE, "local"), (LAB, "netns")])
@pytest.mark.parametrize("action", ["power_loss", "power_loss_all"])
def test_power_loss_is_refused_where_the_kernel_is_this_machines(
    folder: Path, base: str, target: str, action: str
) -> None:
    path = write(folder, base + f'[[faults]]\nat_s = 2\naction = "{action}"\n')
    with pytest.raises(ScenarioError) as info:
        load_scenario(path)
    assert str(info.value) == (
        f"{path}: faults[0].action: {action} reboots a host's kernel unsynced, and on target "
        f'"{target}" that kernel is this machine\'s (run it on hosts of their own: '
        'target = "ssh" or "aws")'
    )


def test_power_loss_on_hosts_of_their_own_loads(folder: Path) -> None:
    ssh = BASE.replace("nodes = 3", 'nodes = 3\ntarget = "ssh"\ninventory = "hosts.json"')
    text = ssh + (
        '[[faults]]\nat_s = 2\naction = "power_loss"\nnode = 2\nrestart_after_s = 5\n'
        '[[faults]]\nat_s = 60\naction = "power_loss_all"\n'
    )
    [s] = load_scenario(write(folder, text))
    assert [(f.action, f.node, f.restart_after_s) for f in s.faults] == [
        ("power_loss", 2, 5.0),
        ("power_loss_all", 0, None),
    ]


# -- workload.queues ---------------------------------------------------------------
def test_queues_default_to_one_and_round_trip(folder: Path) -> None:
    [s] = load_scenario(write(folder, BASE))
    assert s.workload.queues == 1
    text = BASE.replace("messages_per_thread = 10", "messages_per_thread = 10\nqueues = 2")
    [s] = load_scenario(write(folder, text))
    assert s.workload.queues == 2
    again = folder / "again.toml"
    again.write_text(to_toml(s).split("\n[resolved_profile]")[0])
    [back] = load_scenario(again)
    assert back.workload.queues == 2


def test_queues_sweep_like_any_workload_field(folder: Path) -> None:
    text = BASE.replace("messages_per_thread = 10", "messages_per_thread = 10\nqueues = [1, 2]")
    runs = load_scenario(write(folder, text))
    assert [s.workload.queues for s in runs] == [1, 2]
    assert [s.label for s in runs] == ["p3_2t-1s-2r_queues-1", "p3_2t-1s-2r_queues-2"]


@pytest.mark.parametrize(
    ("queues", "clients", "role", "have"),
    [
        # BASE: 1 sender node x 2 threads, 2 receiver nodes x 2 threads
        (3, "", "sender", 2),
        (
            5,
            "sender_threads = 5\nreceiver_threads = 2\n",
            "receiver",
            4,
        ),
        # processes spread a node's threads, they add none: still 2 senders
        (3, "processes_per_node = 3\n", "sender", 2),
    ],
)
def test_queues_nobody_sends_to_or_reads_are_refused_in_one_line(
    folder: Path, queues: int, clients: str, role: str, have: int
) -> None:
    text = BASE.replace("messages_per_thread = 10", f"messages_per_thread = 10\nqueues = {queues}")
    if "threads" in clients:
        text = text.replace("threads = 2\n", clients)
    else:
        text += clients
    path = write(folder, text)
    with pytest.raises(ScenarioError) as info:
        load_scenario(path)
    msg = str(info.value)
    assert msg.startswith(str(path)) and "workload.queues" in msg and "\n" not in msg
    assert f"{have} {role} thread(s)" in msg and f"{role}_threads" in msg
    result = CliRunner().invoke(main, ["validate", str(path)])
    assert result.exit_code == 2 and "workload.queues" in result.output


def test_queues_up_to_the_threads_of_either_role_load(folder: Path) -> None:
    # 1 sender node x 2 threads = 2 senders; 2 receiver nodes x 2 threads = 4 receivers
    text = BASE.replace("messages_per_thread = 10", "messages_per_thread = 10\nqueues = 2")
    [s] = load_scenario(write(folder, text + "processes_per_node = 3\n"))
    assert s.workload.queues == 2
    # the processes do not count, set or left to the cores: 2 senders refuse 3 queues
    # whatever this machine's cores
    text = BASE.replace("messages_per_thread = 10", "messages_per_thread = 10\nqueues = 3")
    for extra in ("", "processes_per_node = 8\n"):
        with pytest.raises(ScenarioError, match="workload.queues"):
            load_scenario(write(folder, text + extra))


@pytest.mark.parametrize("value", ["0", "-1", '"ten"'])
def test_queues_below_one_are_refused(folder: Path, value: str) -> None:
    text = BASE.replace("messages_per_thread = 10", f"messages_per_thread = 10\nqueues = {value}")
    with pytest.raises(ScenarioError, match="workload.queues"):
        load_scenario(write(folder, text))


def test_order_defaults_to_any_and_strict_is_kept_in_the_archived_scenario(
    folder: Path,
) -> None:
    [s] = load_scenario(write(folder, BASE))
    assert s.workload.order == "any"
    text = BASE.replace("messages_per_thread = 10", 'messages_per_thread = 10\norder = "strict"')
    [s] = load_scenario(write(folder, text))
    assert s.workload.order == "strict"
    assert 'order = "strict"' in to_toml(s)


def test_an_unknown_order_is_a_one_line_error(folder: Path) -> None:
    text = BASE.replace("messages_per_thread = 10", 'messages_per_thread = 10\norder = "fifo"')
    with pytest.raises(ScenarioError) as info:
        load_scenario(write(folder, text))
    assert "workload.order" in str(info.value) and "strict" in str(info.value)


def test_brokers_bench_seed_scenarios_validate_and_name_their_experiment() -> None:
    root = Path(__file__).resolve().parents[2] / "scenarios" / "seeds" / "brokers-bench"
    files = sorted(root.rglob("*.toml"))
    assert len(files) >= 17
    for p in files:
        runs = load_scenario(p)
        for s in runs:
            assert s.reference is not None and s.reference.set == "brokers-bench", p
            # ten partitions per topic spread a producer's messages: no order to hold there
            partitioned = s.reference.experiment == "producers-10-topics-10-partitions"
            assert s.workload.order == ("any" if partitioned else "strict"), p
            assert s.cluster.target == ("aws" if p.parent.name == "aws" else "local"), p
        assert p.read_text().startswith("# brokers-bench"), p
    ordered = [s for p in files if "ordered-stream" in p.name for s in load_scenario(p)]
    for s in ordered:
        w, c = s.workload, s.clients
        assert (w.send_batch_max, w.receive_batch_max, w.message_bytes) == (1, 1, 128)
        assert (c.sender_threads, c.receiver_threads, c.processes_per_node) == (1, 1, 1)
    ten = [s for p in files if "ten-topics" in p.name for s in load_scenario(p)]
    assert {s.workload.queues for s in ten} == {10}
    assert {s.profile.settings.partitions for s in ten} == {1}
    acks = {s.reference.experiment: s.profile.settings.acks for s in ten if s.reference}
    assert acks == {
        "ten-topics-acks-all": "all",
        "ten-topics-acks-leader": "1",
        "ten-topics-acks-none": "0",
    }
