"""The userspace link impairer for real: two network namespaces joined by a veth pair, a
UDP echo server in one, probes from the other through the impairer on its veth (delay,
jitter, loss), its exit (rule gone, counts printed, RTT back to baseline), a SIGKILL
(the rule stays, traffic bypasses the queue, ``--remove-only`` heals) and the end of
its stdin.

Needs root (namespaces, iptables) and Debian's iptables and iproute2; each test makes its
own namespaces (``mqimp-<random>-a|b``, 10.254.1.0/24 inside them only) and removes them
in its fixture, whatever happens.
"""

from __future__ import annotations

import json
import os
import secrets
import select
import shutil
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from mqlab.faults.impairer import rules
from mqlab.faults.impairer.delay import Counts

ROOT = Path(__file__).resolve().parents[2]
APT_LIST = "scripts/apt-packages.txt"
ADDR_A, ADDR_B, PREFIX = "10.254.1.1", "10.254.1.2", 24
DEV = "veth0"  # the same name on both sides: each lives in its own namespace
ECHO_PORT = 7
CMD_TIMEOUT_S = 20
READY_TIMEOUT_S = 10

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]

# A UDP echo server: answers every datagram until its stdin ends (or 60 s of silence).
ECHO = """
import select, socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.setsockopt(socket.SOL_SOCKET, 33, 8 << 20)  # SO_RCVBUFFORCE
s.bind((sys.argv[1], int(sys.argv[2])))
print("ready", flush=True)
while True:
    r, _, _ = select.select([s, sys.stdin], [], [], 60)
    if not r or sys.stdin in r:
        break
    while True:
        try:
            data, peer = s.recvfrom(64, socket.MSG_DONTWAIT)
        except BlockingIOError:
            break
        s.sendto(data, peer)
"""

# Sends COUNT numbered probes, one every INTERVAL s (0: as fast as the socket takes them),
# then waits up to WAIT s for the answers; prints each probe's RTT in ms (null: lost).
PROBE = """
import json, select, socket, struct, sys, time
host, port, count = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
interval_ns, wait_ns = int(float(sys.argv[4]) * 1e9), int(float(sys.argv[5]) * 1e9)
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.setsockopt(socket.SOL_SOCKET, 33, 8 << 20)  # SO_RCVBUFFORCE
s.connect((host, port))
s.setblocking(False)
rtt = {}
last = [0]
def drain():
    while True:
        try:
            data = s.recv(64)
        except BlockingIOError:
            return
        except ConnectionRefusedError:
            continue
        now = time.monotonic_ns()
        seq, sent = struct.unpack("!Iq", data)
        rtt[seq] = (now - sent) / 1e6
        last[0] = now
start = nxt = time.monotonic_ns()
seq = 0
while seq < count:
    now = time.monotonic_ns()
    if now >= nxt:
        try:
            s.send(struct.pack("!Iq", seq, now))
            seq += 1
            nxt += interval_ns
        except BlockingIOError:
            select.select([s], [s], [], 0.01)
        drain()
        continue
    select.select([s], [], [], (nxt - now) / 1e9)
    drain()
deadline = time.monotonic_ns() + wait_ns
while len(rtt) < count and time.monotonic_ns() < deadline:
    select.select([s], [], [], max(0, deadline - time.monotonic_ns()) / 1e9)
    drain()
span_s = (last[0] - start) / 1e9
print(json.dumps({"rtts_ms": [rtt.get(i) for i in range(count)], "span_s": span_s}))
"""


# -- helpers ------------------------------------------------------------------------------------
def tool(name: str, package: str) -> str:
    path = shutil.which(name)
    if path is None:  # fail loudly: scripts/bootstrap --test installs it
        pytest.fail(
            f"{name} not on PATH: apt-get install {package} ({APT_LIST}; scripts/bootstrap --test)",
            pytrace=False,
        )
    return path


def sh(*cmd: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=CMD_TIMEOUT_S)
    assert not check or res.returncode == 0, f"{cmd}: exit {res.returncode}: {res.stderr}"
    return res


def namespaces() -> list[str]:
    out = sh("ip", "-j", "netns", "list").stdout
    return [n["name"] for n in json.loads(out or "[]")]


class Lines:
    """A child's stdout read line by line with a deadline (raw reads, no buffering)."""

    def __init__(self, proc: subprocess.Popen[bytes]):
        assert proc.stdout is not None
        self.fd = proc.stdout.fileno()
        self.buf = b""

    def next(self, timeout_s: float) -> str | None:
        deadline = time.monotonic() + timeout_s
        while b"\n" not in self.buf:
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            r, _, _ = select.select([self.fd], [], [], left)
            if r:
                chunk = os.read(self.fd, 4096)
                if not chunk:
                    return None
                self.buf += chunk
        line, self.buf = self.buf.split(b"\n", 1)
        return line.decode()


class Impairer:
    """``python -m mqlab.faults.impairer`` in namespace ``ns``, its stdin held by
    the test."""

    def __init__(self, ns: str, *args: str):
        self.proc = subprocess.Popen(
            [
                "ip",
                "netns",
                "exec",
                ns,
                sys.executable,
                "-m",
                "mqlab.faults.impairer",
                *args,
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            cwd=ROOT,
            start_new_session=True,
        )
        self.lines = Lines(self.proc)

    def ready(self) -> None:
        line = self.lines.next(READY_TIMEOUT_S)
        assert line == "ready", f"impairer said {line!r}: {self.stderr()}"

    def stderr(self) -> str:
        if self.proc.poll() is None:
            return "(still running)"
        assert self.proc.stderr is not None
        return self.proc.stderr.read().decode()

    def end(self, timeout_s: float = 10) -> tuple[int, list[str]]:
        """(exit status, the lines it printed after ``ready``) once it has ended."""
        rc = self.proc.wait(timeout=timeout_s)
        out = []
        while (line := self.lines.next(1)) is not None:
            out.append(line)
        return rc, out

    def stop(self, sig: int = signal.SIGTERM) -> Counts:
        os.kill(self.proc.pid, sig)
        rc, out = self.end()
        assert rc == 0, f"exit {rc}: {self.stderr()}"
        assert len(out) == 1, out
        return Counts.from_line(out[0])

    def kill(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=10)
        for f in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            if f is not None:
                f.close()


class Pair:
    """Namespaces ``a`` and ``b``, a veth between them, a UDP echo server in ``b``."""

    def __init__(self) -> None:
        tag = secrets.token_hex(4)
        self.a, self.b = f"mqimp-{tag}-a", f"mqimp-{tag}-b"
        self.made: list[str] = []
        self.impairers: list[Impairer] = []
        self.echo: subprocess.Popen[bytes] | None = None

    def up(self) -> None:
        for ns in (self.a, self.b):
            self.made.append(ns)
            sh("ip", "netns", "add", ns)
            sh("ip", "-n", ns, "link", "set", "lo", "up")
        sh(
            "ip",
            "-n",
            self.a,
            "link",
            "add",
            DEV,
            "type",
            "veth",
            "peer",
            "name",
            DEV,
            "netns",
            self.b,
        )
        for ns, addr in ((self.a, ADDR_A), (self.b, ADDR_B)):
            sh("ip", "-n", ns, "addr", "add", f"{addr}/{PREFIX}", "dev", DEV)
            sh("ip", "-n", ns, "link", "set", DEV, "up")
        self.echo = subprocess.Popen(
            ["ip", "netns", "exec", self.b, sys.executable, "-c", ECHO, ADDR_B, str(ECHO_PORT)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            start_new_session=True,
        )
        assert Lines(self.echo).next(READY_TIMEOUT_S) == "ready"
        self.settle()

    def settle(self) -> None:
        """Wait until both ends are up and b answers: the kernel turns a veth's carrier on
        within a second of ``link set up`` (linkwatch), and the first probes wait for ARP."""
        deadline = time.monotonic() + READY_TIMEOUT_S
        while time.monotonic() < deadline:
            states = [
                json.loads(sh("ip", "-n", ns, "-j", "link", "show", DEV).stdout)[0]["operstate"]
                for ns in (self.a, self.b)
            ]
            if states == ["UP", "UP"] and None not in self.probe(3, 0.01, wait_s=1)[0]:
                return
            time.sleep(0.05)
        pytest.fail(f"the veth pair did not come up in {READY_TIMEOUT_S} s", pytrace=False)

    def down(self) -> None:
        for imp in self.impairers:
            imp.kill()
        if self.echo is not None:
            if self.echo.poll() is None:
                os.killpg(self.echo.pid, signal.SIGKILL)
            self.echo.wait(timeout=10)
            for f in (self.echo.stdin, self.echo.stdout):
                if f is not None:
                    f.close()
        for ns in self.made:  # the veth goes with its namespaces
            sh("ip", "netns", "del", ns, check=False)
        left = [ns for ns in self.made if ns in namespaces()]
        assert left == [], f"namespaces left: {left}"

    def impair(self, *args: str) -> Impairer:
        imp = Impairer(self.a, *args)
        self.impairers.append(imp)
        return imp

    def probe(
        self, count: int, interval_s: float, wait_s: float = 1.0
    ) -> tuple[list[float | None], float]:
        """(RTT in ms or None per probe, s from the first send to the last answer), from a
        to b's echo server."""
        res = sh(
            "ip", "netns", "exec", self.a, sys.executable, "-c", PROBE,
            ADDR_B, str(ECHO_PORT), str(count), str(interval_s), str(wait_s),
        )  # fmt: skip
        out = json.loads(res.stdout)
        return out["rtts_ms"], out["span_s"]

    def rules(self) -> list[str]:
        out = sh("ip", "netns", "exec", self.a, "iptables", "-w", "-S", "OUTPUT").stdout
        return out.splitlines()

    def mqlab_rules(self) -> list[str]:
        return [r for r in self.rules() if rules.COMMENT_PREFIX in r]


def answered(rtts: list[float | None]) -> list[float]:
    return [r for r in rtts if r is not None]


def baseline_ms(pair: Pair) -> float:
    rtts, _ = pair.probe(50, 0.002)
    got = answered(rtts)
    assert len(got) == 50, f"{50 - len(got)} of 50 probes lost without any impairment"
    return statistics.median(got)


@pytest.fixture
def pair() -> Iterator[Pair]:
    if os.geteuid() != 0:
        pytest.fail("the impairer tests need root (network namespaces, iptables)", pytrace=False)
    tool("ip", "iproute2")
    tool("iptables", "iptables")
    p = Pair()
    try:
        p.up()
        yield p
    finally:
        p.down()


def report(capsys: pytest.CaptureFixture[str], text: str) -> None:
    with capsys.disabled():
        print(f"\n[impair] {text}")


# -- tests ----------------------------------------------------------------------------------------
def test_delay_jitter_and_loss_then_a_clean_exit(
    pair: Pair, capsys: pytest.CaptureFixture[str]
) -> None:
    base = baseline_ms(pair)

    # delay 40 ms, no jitter: every probe waits 40 ms on a's egress
    imp = pair.impair("--dev", DEV, "--queue", "7", "--delay-ms", "40")
    imp.ready()
    [rule] = pair.mqlab_rules()
    assert rule == "-A OUTPUT -o veth0 -m comment --comment mqlab-impair-7 -j NFQUEUE " + (
        "--queue-num 7 --queue-bypass"
    )
    rtts, _ = pair.probe(30, 0.01)
    got = answered(rtts)
    assert len(got) == 30
    delayed = statistics.median(got)
    assert 40 <= delayed < 40 + base + 15, got
    counts = imp.stop()
    assert counts.dropped == 0 and counts.enobufs == 0
    assert counts.packets >= 30 and counts.delayed == counts.packets, counts
    assert pair.mqlab_rules() == []
    after = statistics.median(answered(pair.probe(30, 0.002)[0]))
    assert after < base + 5, (base, after)

    # jitter: 20 +- 10 ms, every RTT at least 10 ms (a packet is never sent early) and
    # spread out; the upper bound holds for 36 of the 40 and leaves 30 ms for the
    # impairer's thread or the probe being scheduled late: a machine at load 30-40 has
    # delayed single probes by 47 ms and by 253 ms, which says nothing of the impairer
    imp = pair.impair("--dev", DEV, "--queue", "7", "--delay-ms", "20", "--jitter-ms", "10")
    imp.ready()
    got = answered(pair.probe(40, 0.01)[0])
    assert len(got) == 40
    assert min(got) >= 10 and sorted(got)[35] < 30 + base + 30, got
    assert max(got) - min(got) >= 5, got
    jittered = (min(got), statistics.median(got), max(got))
    assert imp.stop().delayed >= 40

    # loss 30 % on ~1000 probes
    imp = pair.impair("--dev", DEV, "--queue", "7", "--loss-pct", "30", "--seed", "7")
    imp.ready()
    rtts, _ = pair.probe(1000, 0.001, wait_s=0.5)
    lost = sum(r is None for r in rtts)
    assert 0.2 <= lost / 1000 <= 0.4, lost
    counts = imp.stop()
    assert counts.packets >= 1000 and abs(counts.dropped - lost) <= 2, (counts, lost)
    assert counts.delayed == 0 and pair.mqlab_rules() == []
    report(
        capsys,
        f"baseline RTT {base:.3f} ms; delay 40 ms: median RTT {delayed:.3f} ms; "
        f"RTT after exit {after:.3f} ms; delay 20 ms jitter 10 ms: RTT min/median/max "
        + "/".join(f"{x:.1f}" for x in jittered)
        + f" ms; loss 30 %: lost {lost / 1000:.3f} of 1000",
    )


def test_packets_per_second_through_the_impairer(
    pair: Pair, capsys: pytest.CaptureFixture[str]
) -> None:
    n = 20_000
    rtts, span_plain = pair.probe(n, 0, wait_s=2)
    plain = len(answered(rtts)) / span_plain
    imp = pair.impair("--dev", DEV, "--queue", "11", "--delay-ms", "1")
    imp.ready()
    rtts, span = pair.probe(n, 0, wait_s=2)
    through = len(answered(rtts)) / span
    counts = imp.stop()
    assert counts.packets >= len(answered(rtts)) and counts.dropped == 0
    report(
        capsys,
        f"{n} UDP probes as fast as they go: {through:,.0f} packets/s through the impairer "
        f"(delay 1 ms; {len(answered(rtts))} answered, {counts.enobufs} ENOBUFS), "
        f"{plain:,.0f} packets/s without it",
    )


def test_sigkill_leaves_the_rule_packets_bypass_and_remove_only_heals(pair: Pair) -> None:
    base = baseline_ms(pair)
    other = ["OUTPUT", "-o", DEV, "-p", "udp", "--dport", "9", "-j", "ACCEPT"]
    sh("ip", "netns", "exec", pair.a, "iptables", "-w", "-A", *other)

    imp = pair.impair("--dev", DEV, "--queue", "9", "--delay-ms", "40")
    imp.ready()
    imp.proc.send_signal(signal.SIGKILL)
    assert imp.end()[0] == -signal.SIGKILL
    assert len(pair.mqlab_rules()) == 1  # left behind ...
    got = answered(pair.probe(30, 0.002)[0])
    assert len(got) == 30 and statistics.median(got) < base + 5  # ... but bypassed

    for _ in range(2):  # idempotent
        res = sh(
            "ip", "netns", "exec", pair.a, sys.executable, "-m", "mqlab.faults.impairer",
            "--remove-only",
        )  # fmt: skip
        assert res.stdout == "" and res.stderr == ""
        assert pair.mqlab_rules() == []
    assert "-A OUTPUT -o veth0 -p udp -m udp --dport 9 -j ACCEPT" in pair.rules()


def test_the_end_of_stdin_ends_it_and_a_held_queue_is_refused(pair: Pair) -> None:
    imp = pair.impair("--dev", DEV, "--queue", "5", "--delay-ms", "5")
    imp.ready()

    second = pair.impair("--dev", DEV, "--queue", "5", "--delay-ms", "5")
    rc, out = second.end()
    err = second.stderr()
    assert rc == 2 and out == [], out
    assert err.count("\n") == 1 and "queue 5" in err and "another process holds" in err, err
    assert len(pair.mqlab_rules()) == 1  # the first one's rule, untouched

    assert len(answered(pair.probe(10, 0.002)[0])) == 10
    assert imp.proc.stdin is not None
    imp.proc.stdin.close()
    rc, out = imp.end()
    assert rc == 0 and len(out) == 1, (rc, out, imp.stderr())
    counts = Counts.from_line(out[0])
    assert counts.packets >= 10 and counts.delayed == counts.packets
    assert pair.mqlab_rules() == []
