"""netns lab logic without root or network: names, subnet choice, journal, inventory, checks."""

from __future__ import annotations

import contextlib
import ipaddress
import json
from pathlib import Path

import pytest

from mqlab.errors import FleetError
from mqlab.hosts.process import ProcessRecord
from mqlab.labs.aws import inventory
from mqlab.labs.netns import journal as netns_journal
from mqlab.labs.netns import lab as netns_lab
from mqlab.labs.netns import machine as netns_machine
from mqlab.labs.netns import plan as netns_plan
from mqlab.labs.netns import state as netns_state
from mqlab.labs.netns.journal import Journal
from mqlab.labs.netns.plan import Netem, Shape

SUBNET = ipaddress.IPv4Network("10.213.7.0/24")

# `ip -4 -j route show table all` and `ip -4 -j addr show` of a machine with a default
# route, a docker-ish bridge, an earlier lab's bridge on 10.213.0.0/24 and a VPN address.
ROUTES = [
    {"dst": "default", "gateway": "192.0.2.1", "dev": "eth0"},
    {"dst": "192.0.2.0/24", "dev": "eth0", "prefsrc": "192.0.2.2"},
    {"dst": "172.17.0.0/16", "dev": "docker0"},
    {"dst": "10.213.0.0/24", "dev": "mq0badc0debr"},
    {"type": "local", "dst": "127.0.0.1", "dev": "lo", "table": "local"},
    {"type": "broadcast", "dst": "127.255.255.255", "dev": "lo", "table": "local"},
]
ADDRS = [
    {"ifname": "lo", "addr_info": [{"family": "inet", "local": "127.0.0.1", "prefixlen": 8}]},
    {"ifname": "tun0", "addr_info": [{"family": "inet", "local": "10.213.1.77", "prefixlen": 24}]},
    {"ifname": "eth0", "addr_info": [{"family": "inet6", "local": "fd00::2", "prefixlen": 64}]},
]


SHAPE = Shape(3, 1, 2)


def plan(name: str = "lab", shape: Shape = SHAPE) -> netns_plan.LabPlan:
    return netns_plan.plan_lab(name, shape, SUBNET)


# -- names ------------------------------------------------------------------------------------
def test_hosts_are_named_by_role_with_addresses_from_ten_on() -> None:
    p = plan()
    assert [h.name for h in p.hosts] == [
        "broker-0",
        "broker-1",
        "broker-2",
        "sender-0",
        "receiver-0",
        "receiver-1",
    ]
    assert [h.address for h in p.hosts] == [f"10.213.7.{10 + n}" for n in range(6)]
    assert p.coordinator_ip == "10.213.7.1"
    assert p.hosts[0].namespace == "mqlab-lab-broker-0"
    assert p.hosts[5].namespace == "mqlab-lab-receiver-1"


def test_link_names_are_short_unique_and_derived_from_the_name() -> None:
    longest = "a" * 32
    p = netns_plan.plan_lab(longest, Shape(100, 50, 50), SUBNET)
    names = [h.veth for h in p.hosts] + [p.bridge]
    assert all(len(n) <= 15 for n in names), max(names, key=len)
    assert len(set(names)) == len(names)
    assert all(n.startswith(netns_plan.link_prefix(longest)) for n in names)
    assert netns_plan.link_prefix("lab") == netns_plan.link_prefix("lab")
    assert netns_plan.link_prefix("lab") != netns_plan.link_prefix("lab2")
    assert p.hosts[-1].address == "10.213.7.209"


@pytest.mark.parametrize("bad", ["", "Lab", "a_b", "-a", "a-", "a" * 33, "a/b", "a b", "ä"])
def test_bad_lab_names_are_refused(bad: str) -> None:
    with pytest.raises(FleetError, match="lab name"):
        netns_plan.check_name(bad)


def test_namespaces_map_back_to_their_lab_without_prefix_confusion() -> None:
    assert netns_plan.lab_of_namespace("mqlab-lab-broker-0") == "lab"
    assert netns_plan.lab_of_namespace("mqlab-a-b-receiver-12") == "a-b"
    assert netns_plan.lab_of_namespace("mqlab-a-broker-broker-0") == "a-broker"
    assert netns_plan.lab_of_namespace("mqlab-lab-client-0") is None
    assert netns_plan.lab_of_namespace("other-lab-broker-0") is None


# -- subnet -----------------------------------------------------------------------------------
def test_subnet_avoids_routes_addresses_and_other_labs() -> None:
    assert str(netns_plan.choose_subnet([], [], [])) == "10.213.0.0/24"
    # 10.213.0 is routed, 10.213.1 holds an address, 10.213.2 belongs to another lab
    chosen = netns_plan.choose_subnet(ROUTES, ADDRS, ["10.213.2.0/24"])
    assert str(chosen) == "10.213.3.0/24"


def test_the_default_route_does_not_count_but_a_covering_route_does() -> None:
    covering = [{"dst": "default"}, {"dst": "10.0.0.0/8", "dev": "vpn0"}]
    assert str(netns_plan.choose_subnet(covering, [], [])) == "172.29.0.0/24"
    everything = [{"dst": "10.0.0.0/8"}, {"dst": "172.16.0.0/12"}]
    with pytest.raises(FleetError, match="no free /24"):
        netns_plan.choose_subnet(everything, [], [])


def test_host_routes_and_junk_are_read_safely() -> None:
    routes = [{"dst": "10.213.0.5"}, {"dst": "fe80::/64"}, {"dst": "nonsense"}, {}]
    assert str(netns_plan.choose_subnet(routes, [], [])) == "10.213.1.0/24"


# -- journal ----------------------------------------------------------------------------------
def test_journal_records_before_creation_and_round_trips(tmp_path: Path) -> None:
    path = tmp_path / "state.json"
    j = Journal.create(path, plan(), Netem(20, 5))
    on_disk = json.loads(path.read_text())
    assert on_disk["format_version"] == 1
    assert on_disk["status"] == "creating"
    assert on_disk["netns"] == [] and on_disk["links"] == []
    j.will_create_link("mq12345678br")
    j.will_create_netns("mqlab-lab-broker-0")
    j.will_create_netns("mqlab-lab-broker-0")  # recorded once
    j.will_start_sshd("broker-0")
    on_disk = json.loads(path.read_text())  # written at once: a SIGKILL now loses nothing
    assert on_disk["netns"] == ["mqlab-lab-broker-0"]
    assert on_disk["links"] == ["mq12345678br"]
    assert on_disk["sshd"] == {"broker-0": None}
    j.started_sshd("broker-0", ProcessRecord(41, 41, 12345, "sshd"))
    j.mark_up()
    again = Journal.load(path)
    assert again is not None
    assert again.status == "up"
    assert again.shape == Shape(3, 1, 2)
    assert again.netem == Netem(20.0, 5.0)
    assert again.sshd_records == {"broker-0": ProcessRecord(41, 41, 12345, "sshd")}
    assert not (tmp_path / "state.json.tmp").exists()


def test_journal_versions(tmp_path: Path) -> None:
    path = tmp_path / "state.json"
    assert Journal.load(path) is None
    path.write_text("{not json")
    assert Journal.load(path) is None  # unreadable: down falls back to the name sweep
    path.write_text(json.dumps({"format_version": 99}))
    with pytest.raises(FleetError, match="format_version 99"):
        Journal.load(path)


def test_leftovers_are_the_journal_plus_the_name_sweep(tmp_path: Path) -> None:
    j = Journal.create(tmp_path / "state.json", plan(), Netem())
    j.will_create_netns("mqlab-lab-broker-0")
    j.will_create_netns("mqlab-lab-broker-1")  # recorded, never created
    j.will_create_link("mq0000000xbr")  # recorded under an old name
    existing_ns = ["mqlab-lab-broker-0", "mqlab-lab-sender-0", "mqlab-lab2-broker-0", "other"]
    prefix = netns_plan.link_prefix("lab")
    links = [
        {"ifname": "eth0"},
        {"ifname": f"{prefix}br"},
        {"ifname": f"{prefix}v3"},
        {"ifname": "mq0000000xbr"},
        {"ifname": "renamed0", "ifalias": "mqlab-lab:lab"},
        {"ifname": "other0", "ifalias": "mqlab-lab:lab2"},
        {"ifname": netns_plan.link_prefix("lab2") + "br"},
    ]
    ns, found = netns_journal.leftovers("lab", j, existing_ns, links)
    assert ns == ["mqlab-lab-broker-0", "mqlab-lab-sender-0"]
    assert found == sorted([f"{prefix}br", f"{prefix}v3", "mq0000000xbr", "renamed0"])
    ns, found = netns_journal.leftovers("lab", None, existing_ns, links)  # journal lost
    assert ns == ["mqlab-lab-broker-0", "mqlab-lab-sender-0"]
    assert found == sorted([f"{prefix}br", f"{prefix}v3", "renamed0"])


# -- files the lab writes ---------------------------------------------------------------------
def test_sshd_config_has_the_lab_settings(tmp_path: Path) -> None:
    h = plan().hosts[1]
    cfg = netns_plan.sshd_config(h, tmp_path)
    lines = set(cfg.splitlines())
    for expected in (
        f"ListenAddress {h.address}:22",
        f"AuthorizedKeysFile {tmp_path / 'id_ed25519.pub'}",
        f"HostKey {tmp_path / 'sshd' / 'broker-1' / 'ssh_host_ed25519_key'}",
        f"PidFile {tmp_path / 'sshd' / 'broker-1' / 'sshd.pid'}",
        "PermitRootLogin prohibit-password",
        "PasswordAuthentication no",
        "KbdInteractiveAuthentication no",
        "UsePAM no",
        "StrictModes no",
        "MaxSessions 200",
        "MaxStartups 200",
        "UseDNS no",
        "Subsystem sftp internal-sftp",
    ):
        assert expected in lines, expected


def test_known_hosts_lines_drop_comments() -> None:
    text = netns_plan.known_hosts_text([("10.213.7.10", "ssh-ed25519 AAAAC3Nz root@x")])
    assert text == "10.213.7.10 ssh-ed25519 AAAAC3Nz\n"


def test_netem_arguments() -> None:
    assert Netem(20, 0).tc_args() == ["netem", "delay", "20ms"]
    assert Netem(20, 2.5).tc_args() == ["netem", "delay", "20ms", "2.5ms"]


def test_inventory_round_trips_through_the_inventory_module(tmp_path: Path) -> None:
    p = plan("lab", Shape(2, 1, 1))
    inv = netns_plan.build_inventory(p, tmp_path, Netem(20, 1))
    path = tmp_path / "inventory.json"
    inventory.save(inv, path)
    raw = json.loads(path.read_text())
    assert raw["format_version"] == 2 and raw["kind"] == "netns"
    assert raw["ssh_key"] == "id_ed25519"  # relative to the file's folder
    back = inventory.load(path)
    assert back.lab_id == "lab" and back.region == "netns" and back.ssh_user == "root"
    assert back.ssh_key == tmp_path / "id_ed25519"
    assert back.known_hosts == tmp_path / "known_hosts"
    assert back.price_per_hour_usd is None and back.broker == "" and back.expires_at == ""
    assert [h.private_ip for h in back.hosts] == [f"10.213.7.{n}" for n in (10, 11, 12, 13)]
    assert back.brokers[1].instance_id == "mqlab-lab-broker-1"
    assert all(h.public_ip == "" for h in back.hosts)
    assert back.root_of(back.receivers[0]) == str(tmp_path / "hosts" / "receiver-0")
    assert back.remote_root == str(tmp_path / "hosts" / "default")
    assert back.network == {
        "delay_ms": 20.0,
        "jitter_ms": 1.0,
        "subnet": "10.213.7.0/24",
        "coordinator_ip": "10.213.7.1",
    }


# -- environment checks -----------------------------------------------------------------------
def test_not_root_is_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(netns_machine.os, "geteuid", lambda: 1000)
    with pytest.raises(FleetError) as e:
        netns_lab.up("lab", 1, 1, 1)
    assert str(e.value) == netns_plan.ROOT_MESSAGE
    assert "\n" not in str(e.value)


@pytest.mark.parametrize(
    ("missing", "package", "delay"),
    [
        ("ip", "iproute2", 0.0),
        ("/usr/sbin/sshd", "openssh-server", 0.0),
        ("ssh-keygen", "openssh-client", 0.0),
        ("tc", "iproute2", 5.0),
    ],
)
def test_missing_tools_name_their_package(
    monkeypatch: pytest.MonkeyPatch, missing: str, package: str, delay: float
) -> None:
    monkeypatch.setattr(netns_machine.os, "geteuid", lambda: 0)
    monkeypatch.setattr(
        netns_machine.shutil, "which", lambda t: None if t == missing else f"/x/{t}"
    )
    with pytest.raises(FleetError, match=f"install the Debian package {package}"):
        netns_lab.up("lab", 1, 1, 1, delay_ms=delay)


def test_tc_is_only_needed_for_netem(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(netns_machine.shutil, "which", lambda t: None if t == "tc" else f"/x/{t}")
    netns_machine.require_tools(netem=False)


@pytest.mark.parametrize(
    ("args", "problem"),
    [
        ((0, 0, 0), "1 to 200 hosts"),
        ((150, 30, 21), "1 to 200 hosts"),
        ((-1, 1, 1), "1 to 200 hosts"),
    ],
)
def test_shapes_are_checked_before_anything(args: tuple[int, int, int], problem: str) -> None:
    with pytest.raises(FleetError, match=problem):
        netns_lab.up("lab", *args)


def test_jitter_needs_a_delay() -> None:
    with pytest.raises(FleetError, match="jitter needs a delay"):
        netns_lab.up("lab", 1, 1, 1, delay_ms=0, jitter_ms=3)


# -- ownership across state dirs --------------------------------------------------------------
def test_labs_of_another_state_dir_are_not_ours(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(netns_state, "REGISTRY_DIR", tmp_path / "registry")
    monkeypatch.setattr(
        netns_machine, "namespaces", lambda: ["mqlab-theirs-broker-0", "mqlab-gone-broker-0"]
    )
    monkeypatch.setattr(netns_machine, "links", lambda: [])
    monkeypatch.setattr(netns_machine, "require_root", lambda: None)
    monkeypatch.setattr(netns_machine, "require_tools", lambda netem: None)
    monkeypatch.setattr(netns_state, "labs_lock", contextlib.nullcontext)
    other, mine = tmp_path / "other", tmp_path / "mine"
    for state, name in ((other, "theirs"), (other, "gone"), (mine, "ours")):
        monkeypatch.setenv("MQLAB_STATE_DIR", str(state))
        netns_state.lab_dir(name).mkdir(parents=True)
        (netns_state.lab_dir(name) / "state.json").write_text("{}")
        netns_state.claim(name)
    (other / "labs" / "gone" / "state.json").unlink()  # its state dir lost the lab

    monkeypatch.setenv("MQLAB_STATE_DIR", str(mine))
    assert netns_state.foreign_owner("ours") is None
    assert netns_state.foreign_owner("theirs") == other / "labs" / "theirs"
    assert netns_state.foreign_owner("gone") is None  # an orphan: anyone may remove it
    assert netns_state.foreign_owner("never") is None
    assert netns_state.list_labs() == ["gone", "ours"]
    with pytest.raises(FleetError, match=f"MQLAB_STATE_DIR={other} mqlab lab down"):
        netns_lab.up("theirs", 1, 1, 1)

    monkeypatch.setenv("MQLAB_STATE_DIR", str(other))
    assert netns_state.foreign_owner("ours") == mine / "labs" / "ours"
    assert netns_state.list_labs() == ["gone", "theirs"]


def test_owned_paths_are_only_mqlab_temp_dirs(tmp_path: Path) -> None:
    (tmp_path / "hosts" / "broker-0").mkdir(parents=True)
    (tmp_path / "hosts" / "broker-1").mkdir(parents=True)
    (tmp_path / "hosts" / "broker-0" / "owned").write_text(
        "/tmp/mqlab-pgdata-a1\n/etc\n/tmp/other\nrelative/mqlab-x\n/tmp/mqlab-x/../../etc\n\n"
    )
    (tmp_path / "hosts" / "broker-1" / "owned").write_text("/tmp/mqlab-pgdata-b2\n")
    assert netns_lab.owned_paths(tmp_path) == [
        Path("/tmp/mqlab-pgdata-a1"),
        Path("/tmp/mqlab-pgdata-b2"),
    ]
    assert netns_lab.owned_paths(tmp_path / "nothing") == []


@pytest.mark.parametrize("gone", [True, False])
def test_down_takes_a_veth_gone_with_its_peer_as_removed_and_nothing_else(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, gone: bool
) -> None:
    """`ip link del` of a veth whose namespace took it away meanwhile fails ("No such device"
    or "Cannot find device"): down goes on when the link is gone, and fails when it is not."""
    monkeypatch.setenv("MQLAB_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setattr(netns_state, "REGISTRY_DIR", tmp_path / "registry")
    monkeypatch.setattr(netns_machine, "require_root", lambda: None)
    monkeypatch.setattr(netns_machine, "require_tool", lambda tool: None)
    monkeypatch.setattr(netns_state, "labs_lock", contextlib.nullcontext)
    link = netns_plan.link_prefix("lab") + "v1"
    present = [{"ifname": link}]
    monkeypatch.setattr(netns_machine, "namespaces", lambda: [])
    monkeypatch.setattr(netns_machine, "links", lambda: list(present))
    monkeypatch.setattr(netns_machine, "end_processes", lambda namespaces, records: None)
    ran: list[list[str]] = []

    def run(cmd: list[str], timeout_s: float = 30.0) -> str:
        ran.append(cmd)
        if gone:
            present.clear()  # the kernel removed it between `ip`'s lookup and its delete
        raise FleetError(f"`{' '.join(cmd)}` failed: RTNETLINK answers: No such device")

    monkeypatch.setattr(netns_machine, "run", run)
    netns_state.lab_dir("lab").mkdir(parents=True)
    netns_state.claim("lab")
    if gone:
        assert netns_lab.down("lab") is True
        assert not netns_state.lab_dir("lab").exists()
    else:
        with pytest.raises(FleetError, match="No such device"):
            netns_lab.down("lab")
    assert ran == [["ip", "link", "del", link]]
