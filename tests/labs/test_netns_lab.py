"""netns labs for real: namespaces, veths, a bridge and an sshd per host, reached with paramiko.

Needs root (namespaces, links). Every test removes its lab in a ``finally`` and checks that
no namespace, link, sshd or directory is left.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import paramiko
import pytest

from mqlab.errors import FleetError
from mqlab.labs.aws.inventory import Host, Inventory
from mqlab.labs.netns import lab as netns_lab
from mqlab.labs.netns import machine as netns_machine
from mqlab.labs.netns import plan as netns_plan
from mqlab.labs.netns import state as netns_state

ROOT = Path(__file__).resolve().parents[2]

pytestmark = [
    pytest.mark.integration,
    pytest.mark.timeout(60),
]


# -- helpers ----------------------------------------------------------------------------------
def namespaces_of(name: str) -> list[str]:
    out = subprocess.run(["ip", "-j", "netns", "list"], capture_output=True, text=True, timeout=10)
    names = [n["name"] for n in json.loads(out.stdout or "[]")]
    return [n for n in names if n.startswith(f"mqlab-{name}-")]


def links_of(name: str) -> list[str]:
    out = subprocess.run(["ip", "-j", "link", "show"], capture_output=True, text=True, timeout=10)
    prefix = netns_plan.link_prefix(name)
    return [
        link["ifname"]
        for link in json.loads(out.stdout)
        if link["ifname"].startswith(prefix) or link.get("ifalias") == f"mqlab-lab:{name}"
    ]


def sshd_pids(lab_dir: Path) -> list[int]:
    state = json.loads((lab_dir / "state.json").read_text())
    return [rec["pid"] for rec in state["sshd"].values() if rec]


def pid_alive(pid: int) -> bool:
    """Is ``pid`` a live process? (a zombie has ended: an orphan waits there for init to reap it;
    down reaps the sshds it started itself)"""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def assert_gone(name: str, lab_dir: Path, pids: list[int]) -> None:
    assert namespaces_of(name) == []
    assert links_of(name) == []
    assert not lab_dir.exists()
    assert [p for p in pids if pid_alive(p)] == []


def connect(inv: Inventory, host: Host) -> paramiko.SSHClient:
    """Strict host key checking: only the lab's known_hosts, unknown keys rejected."""
    client = paramiko.SSHClient()
    assert inv.known_hosts is not None and inv.ssh_key is not None
    client.load_host_keys(str(inv.known_hosts))
    client.set_missing_host_key_policy(paramiko.RejectPolicy())
    client.connect(
        host.ssh_address,
        port=inv.ssh_port,
        username=inv.ssh_user,
        key_filename=str(inv.ssh_key),
        look_for_keys=False,
        allow_agent=False,
        timeout=10,
        banner_timeout=10,
        auth_timeout=10,
    )
    return client


def run(client: paramiko.SSHClient, cmd: str, timeout_s: float = 20) -> str:
    _, stdout, stderr = client.exec_command(cmd, timeout=timeout_s)
    rc = stdout.channel.recv_exit_status()
    out = stdout.read().decode()
    assert rc == 0, f"{cmd!r}: exit {rc}: {stderr.read().decode()}"
    return out


@pytest.fixture
def lab_name(state_dir: Path) -> Iterator[str]:
    """A lab name no one else on this machine uses; the lab is removed afterwards, whatever."""
    name = f"t{secrets.token_hex(4)}"
    try:
        yield name
    finally:
        os.environ["MQLAB_STATE_DIR"] = str(state_dir)  # a test may have pointed it elsewhere
        netns_lab.down(name)
        assert namespaces_of(name) == [] and links_of(name) == []


# -- tests ------------------------------------------------------------------------------------
def test_hosts_have_their_address_reach_each_other_and_nothing_else(lab_name: str) -> None:
    lab = netns_lab.up(lab_name, brokers=1, senders=1, receivers=1)
    inv = lab.inventory
    assert inv.kind == "netns" and len(inv.hosts) == 3
    assert inv.ssh_key is not None and (inv.ssh_key.stat().st_mode & 0o777) == 0o600
    pids = sshd_pids(lab.dir)

    clients = {h.name: connect(inv, h) for h in inv.hosts}
    try:
        for h in inv.hosts:
            c = clients[h.name]
            assert f"inet {h.private_ip}/24" in run(c, "ip -4 -o addr show")
            assert run(c, "ip route show default").strip() == ""  # nothing leaves the machine
            assert run(c, "ip -4 route show").split()[0] == inv.network["subnet"]
            root = inv.root_of(h)
            assert Path(root).is_dir() and root.endswith(f"/hosts/{h.name}")

        a, b = inv.hosts[1], inv.hosts[2]
        listener = (
            f"import socket; s = socket.create_server(('{b.private_ip}', 5555)); "
            "s.settimeout(20); print('ready', flush=True); c, _ = s.accept(); "
            f"c.sendall(b'hello from {b.name}')"
        )
        _, out_b, _ = clients[b.name].exec_command(f'python3 -c "{listener}"', timeout=30)
        assert out_b.readline().strip() == "ready"
        dial = (
            f"import socket; c = socket.create_connection(('{b.private_ip}', 5555), 10); "
            "print(c.recv(64).decode())"
        )
        assert run(clients[a.name], f'python3 -c "{dial}"').strip() == f"hello from {b.name}"
        assert out_b.channel.recv_exit_status() == 0
    finally:
        for c in clients.values():
            c.close()

    st = netns_state.status(lab_name)
    assert st["up"] and all(h["sshd_alive"] and h["namespace_exists"] for h in st["hosts"])
    assert lab_name in netns_state.list_labs()

    t0 = time.monotonic()
    again = netns_lab.up(lab_name, brokers=1, senders=1, receivers=1)  # reused, not rebuilt
    assert time.monotonic() - t0 < 2 and again.inventory == inv and sshd_pids(lab.dir) == pids
    with pytest.raises(FleetError, match=f"mqlab lab down --name {lab_name}"):
        netns_lab.up(lab_name, brokers=2, senders=1, receivers=1)

    assert netns_lab.down(lab_name) is True
    assert_gone(lab_name, lab.dir, pids)
    assert netns_lab.down(lab_name) is False
    assert netns_state.find(lab_name) is None


def _has_netem() -> bool:
    """Can this kernel do netem? (tried on a throwaway namespace's loopback)"""
    ns = f"mqlab-probe{secrets.token_hex(3)}"
    subprocess.run(["ip", "netns", "add", ns], check=True, timeout=10)
    try:
        r = subprocess.run(
            ["tc", "-n", ns, "qdisc", "add", "dev", "lo", "root", "netem", "delay", "1ms"],
            capture_output=True,
            timeout=10,
        )
        return r.returncode == 0
    finally:
        subprocess.run(["ip", "netns", "del", ns], check=True, timeout=10)


def test_netem_delays_both_directions(lab_name: str) -> None:
    if not _has_netem():
        with pytest.raises(FleetError, match="no netem qdisc") as e:
            netns_lab.up(lab_name, brokers=1, senders=1, receivers=0, delay_ms=20)
        assert "\n" not in str(e.value)
        assert_gone(lab_name, netns_state.lab_dir(lab_name), [])  # up cleaned up after itself
        return  # this kernel has no netem (CONFIG_NET_SCH_NETEM): the clear error is the outcome

    lab = netns_lab.up(lab_name, brokers=1, senders=1, receivers=0, delay_ms=20)
    inv = lab.inventory
    assert inv.network["delay_ms"] == 20 and inv.network["jitter_ms"] == 0
    assert netns_state.status(lab_name)["netem"] == {"delay_ms": 20.0, "jitter_ms": 0.0}
    a, b = inv.hosts
    probe = (
        "import socket, time; best = 1e9\n"
        "for _ in range(3):\n"
        f"    t = time.monotonic(); socket.create_connection(('{b.private_ip}', 22), 10).close()\n"
        "    best = min(best, time.monotonic() - t)\n"
        "print(best * 1000)"
    )
    client = connect(inv, a)
    try:
        rtt_ms = float(run(client, f'python3 -c "{probe}"'))
    finally:
        client.close()
    assert rtt_ms >= 38, f"TCP connect took {rtt_ms:.1f} ms; 2 x 20 ms netem expected"
    pids = sshd_pids(lab.dir)
    assert netns_lab.down(lab_name)
    assert_gone(lab_name, lab.dir, pids)


def test_down_ends_every_process_in_the_namespaces(lab_name: str) -> None:
    lab = netns_lab.up(lab_name, brokers=1, senders=0, receivers=0)
    host = lab.inventory.hosts[0]
    pids = sshd_pids(lab.dir)
    # a "broker" started by a run over ssh that ignores SIGTERM (down must SIGKILL it) ...
    ready = Path(lab.inventory.root_of(host)) / "stubborn.ready"
    stubborn = (
        "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
        f"open('{ready}', 'w').close(); time.sleep(300)"
    )
    client = connect(lab.inventory, host)
    try:
        out = run(client, f'setsid python3 -c "{stubborn}" >/dev/null 2>&1 < /dev/null & echo $!')
    finally:
        client.close()
    deadline = time.monotonic() + 10
    while not ready.exists() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert ready.exists(), "the stubborn process never started"
    remote_pid = int(out.strip())
    # ... and a plain worker started in the namespace directly
    worker = subprocess.Popen(["ip", "netns", "exec", host.instance_id, "sleep", "300"])
    try:
        assert pid_alive(remote_pid) and worker.poll() is None
        t0 = time.monotonic()
        assert netns_lab.down(lab_name)
        took = time.monotonic() - t0
        assert worker.wait(timeout=5) is not None
        assert not pid_alive(remote_pid)
        assert 4 < took < 15, f"down took {took:.1f} s (SIGTERM, ~5 s, then SIGKILL)"
        assert_gone(lab_name, lab.dir, pids)
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait()


FAKE_IP = """#!/bin/sh
# `ip`, except that it hangs at one step of `mqlab lab up` (STALL_AT), where the test kills it
if [ "$STALL_AT" = lo ] && [ "$*" = "-n $STALL_NS link set lo up" ]; then exec sleep 60; fi
if [ "$STALL_AT" = sshd ] && [ "$1 $2 $3" = "netns exec $STALL_NS" ]; then
    exec {ip} netns exec "$STALL_NS" sleep 60  # an "sshd" that never listens
fi
exec {ip} "$@"
"""


@pytest.mark.parametrize(
    ("stall_at", "stall_host"),
    [("lo", "broker-0"), ("sshd", "receiver-0")],
    ids=["killed-after-the-first-namespace", "killed-with-sshds-running"],
)
def test_down_after_up_was_killed_half_way(
    lab_name: str, state_dir: Path, tmp_path: Path, stall_at: str, stall_host: str
) -> None:
    real_ip = shutil.which("ip")
    assert real_ip is not None
    fake = tmp_path / "bin" / "ip"
    fake.parent.mkdir()
    fake.write_text(FAKE_IP.format(ip=real_ip))
    fake.chmod(0o755)
    stall_ns = f"mqlab-{lab_name}-{stall_host}"
    env = dict(os.environ, MQLAB_STATE_DIR=str(state_dir), STALL_AT=stall_at, STALL_NS=stall_ns)
    env["PATH"] = f"{fake.parent}:{env['PATH']}"
    cmd = [sys.executable, "-m", "mqlab", "lab", "up", "--name", lab_name]
    cmd += ["--brokers", "3", "--senders", "1", "--receivers", "1"]
    journal = state_dir / "labs" / lab_name / "state.json"

    def stalled() -> bool:
        try:
            seen = json.loads(journal.read_text())
        except (OSError, json.JSONDecodeError):
            return False
        if stall_at == "lo":
            return bool(seen["netns"]) and stall_ns in namespaces_of(lab_name)
        started = [rec for rec in seen["sshd"].values() if rec]
        return len(started) == 5 and netns_machine.ns_pids(stall_ns) != []

    proc = subprocess.Popen(
        cmd, env=env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        start_new_session=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 30
        while not stalled() and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.01)
        assert stalled(), f"up never got to {stall_at}: {proc.stderr.read()!r}"  # type: ignore[union-attr]
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)  # mqlab and the step it hangs in
        proc.wait(timeout=10)
        assert proc.stderr is not None
        proc.stderr.close()

    state = json.loads(journal.read_text())
    assert state["status"] == "creating" and state["netns"]
    assert netns_state.find(lab_name) is None
    assert netns_state.status(lab_name)["up"] is False
    lab_dir = journal.parent
    pids = sshd_pids(lab_dir)
    if stall_at == "sshd":  # orphans now: sshds (and the fake one) outlived mqlab
        assert len(pids) == 5 and all(pid_alive(p) for p in pids)
    assert netns_lab.down(lab_name) is True
    assert_gone(lab_name, lab_dir, pids)


def test_down_sweeps_by_name_when_the_journal_is_lost(lab_name: str) -> None:
    lab = netns_lab.up(lab_name, brokers=1, senders=1, receivers=0)
    pids = sshd_pids(lab.dir)
    shutil.rmtree(lab.dir)
    # another state dir's lab, or remains: up does not touch them without a journal
    with pytest.raises(FleetError, match=f"mqlab lab down --name {lab_name}"):
        netns_lab.up(lab_name, brokers=1, senders=1, receivers=0)
    assert len(namespaces_of(lab_name)) == 2 and lab_name in netns_state.list_labs()
    assert netns_lab.down(lab_name) is True
    assert_gone(lab_name, lab.dir, pids)


def test_a_lab_of_another_state_dir_is_left_alone(
    lab_name: str, state_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    lab = netns_lab.up(lab_name, brokers=1, senders=0, receivers=1)
    pids = sshd_pids(lab.dir)
    monkeypatch.setenv("MQLAB_STATE_DIR", str(tmp_path / "another"))
    assert lab_name not in netns_state.list_labs()
    assert netns_state.find(lab_name) is None
    assert netns_state.status(lab_name)["up"] is True  # shown, read-only
    with pytest.raises(FleetError, match=f"MQLAB_STATE_DIR={state_dir} mqlab lab down"):
        netns_lab.down(lab_name)
    with pytest.raises(FleetError, match="belongs to another state dir"):
        netns_lab.up(lab_name, brokers=1, senders=0, receivers=1)
    assert all(pid_alive(p) for p in pids) and len(namespaces_of(lab_name)) == 2
    monkeypatch.setenv("MQLAB_STATE_DIR", str(state_dir))
    assert netns_state.find(lab_name) is not None
    assert netns_lab.down(lab_name)
    assert_gone(lab_name, lab.dir, pids)


def test_the_cli_without_root_says_so_on_one_line(tmp_path: Path) -> None:
    # uid 65534 keeps CAP_DAC_READ_SEARCH only to read this (root-owned) checkout
    setpriv = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
    setpriv += ["--inh-caps=+dac_read_search", "--ambient-caps=+dac_read_search"]
    env = dict(os.environ, MQLAB_STATE_DIR=str(tmp_path / "state"), PYTHONDONTWRITEBYTECODE="1")
    out = subprocess.run(
        [*setpriv, sys.executable, "-m", "mqlab", "lab", "up", "--name", "nonroot"],
        env=env,
        cwd="/",
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 2, out.stderr
    assert out.stderr == f"mqlab: error: {netns_plan.ROOT_MESSAGE}\n"
    assert not (tmp_path / "state").exists()
