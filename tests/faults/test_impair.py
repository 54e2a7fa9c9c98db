"""The link impairer without root or network: nfnetlink messages packed and parsed against
bytes built here from the kernel's struct layouts, the seeded scheduler (drops, release
times, order), the CLI's argument errors, and the iptables command lines, run against a
stand-in ``iptables`` that keeps the OUTPUT chain in a file (no kernel rule is touched)."""

from __future__ import annotations

import errno
import json
import os
import random
import socket
import struct
import sys
from pathlib import Path

import pytest

from mqlab.errors import FleetError
from mqlab.faults.impairer import common, main, netlink, nfqueue, rules
from mqlab.faults.impairer.delay import Counts, Impairment, Scheduler
from mqlab.faults.impairer.main import Options, RemoveOnly

MS = 1_000_000  # ns

# The layouts (include/uapi/linux/netlink.h, netfilter/nfnetlink.h, nfnetlink_queue.h):
# nlmsghdr {u32 len; u16 type; u16 flags; u32 seq; u32 pid} in host order;
# nfgenmsg {u8 family; u8 version; be16 res_id}; nlattr {u16 len; u16 type} in host order,
# its value padded to 4 bytes; nfqnl_msg_packet_hdr {be32 id; be16 hw_protocol; u8 hook}
# packed; nfqnl_msg_verdict_hdr {be32 verdict; be32 id}; nfqnl_msg_config_cmd {u8 cmd;
# u8 pad; be16 pf}; nfqnl_msg_config_params {be32 copy_range; u8 copy_mode} packed.
QUEUE_PACKET, QUEUE_VERDICT, QUEUE_CONFIG = 0x0300, 0x0301, 0x0302  # NFNL_SUBSYS_QUEUE = 3
NLMSG_ERROR = 2
F_REQUEST, F_ACK = 1, 4


def nlmsghdr(length: int, msg_type: int, flags: int, seq: int, pid: int = 0) -> bytes:
    return struct.pack("=IHHII", length, msg_type, flags, seq, pid)


def nlattr(attr_type: int, value: bytes) -> bytes:
    pad = -(4 + len(value)) % 4
    return struct.pack("=HH", 4 + len(value), attr_type) + value + b"\0" * pad


def nfgenmsg(family: int, queue: int) -> bytes:
    return bytes([family, 0]) + queue.to_bytes(2, "big")


def packet_message(queue: int, packet_id: int, hook: int = 3, extra: bytes = b"") -> bytes:
    """An NFQNL_MSG_PACKET as the kernel sends it in META mode (header, then other attrs)."""
    hdr = packet_id.to_bytes(4, "big") + (0x0800).to_bytes(2, "big") + bytes([hook])
    body = nfgenmsg(socket.AF_INET, queue) + nlattr(1, hdr) + extra
    return nlmsghdr(16 + len(body), QUEUE_PACKET, 0, 0) + body


def error_message(err: int, seq: int) -> bytes:
    """NLMSG_ERROR answering request ``seq`` (errno ``err``, 0 = ack) with its header."""
    body = struct.pack("=i", -err) + nlmsghdr(28, QUEUE_CONFIG, F_REQUEST | F_ACK, seq, 99)
    return nlmsghdr(16 + len(body), NLMSG_ERROR, 0, seq) + body


# -- packing ------------------------------------------------------------------------------------
def test_a_verdict_is_header_nfgenmsg_and_a_verdict_attribute() -> None:
    expected = (
        nlmsghdr(32, QUEUE_VERDICT, F_REQUEST, 0)
        + nfgenmsg(socket.AF_UNSPEC, 7)
        + struct.pack("=HH", 12, 2)
        + bytes.fromhex("00000001")  # NF_ACCEPT
        + bytes.fromhex("deadbeef")  # the packet id
    )
    assert netlink.verdict_message(7, 0xDEADBEEF, netlink.NF_ACCEPT) == expected
    drop = netlink.verdict_message(65535, 1, netlink.NF_DROP)
    assert drop[16:20] == b"\x00\x00\xff\xff" and drop[24:] == bytes.fromhex("0000000000000001")


def test_bind_is_a_config_command_for_af_inet_asking_for_an_ack() -> None:
    expected = (
        nlmsghdr(28, QUEUE_CONFIG, F_REQUEST | F_ACK, 5)
        + nfgenmsg(socket.AF_INET, 7)
        + struct.pack("=HH", 8, 1)  # NFQA_CFG_CMD
        + bytes([1, 0])  # NFQNL_CFG_CMD_BIND, pad
        + socket.AF_INET.to_bytes(2, "big")
    )
    assert netlink.bind_request(7, 5) == expected


def test_params_ask_for_metadata_only_a_long_queue_and_fail_open() -> None:
    expected_attrs = (
        struct.pack("=HH", 9, 2)  # NFQA_CFG_PARAMS: 5 packed bytes + 3 of padding
        + bytes.fromhex("00000000")  # copy_range
        + bytes([1])  # NFQNL_COPY_META
        + b"\0\0\0"
        + struct.pack("=HH", 8, 3)  # NFQA_CFG_QUEUE_MAXLEN
        + (65536).to_bytes(4, "big")
        + struct.pack("=HH", 8, 5)  # NFQA_CFG_FLAGS: FAIL_OPEN (1) | GSO (4)
        + (5).to_bytes(4, "big")
        + struct.pack("=HH", 8, 4)  # NFQA_CFG_MASK: the same bits
        + (5).to_bytes(4, "big")
    )
    body = nfgenmsg(socket.AF_UNSPEC, 12) + expected_attrs
    expected = nlmsghdr(16 + len(body), QUEUE_CONFIG, F_REQUEST | F_ACK, 6) + body
    assert netlink.params_request(12, 6, maxlen=65536) == expected
    assert len(expected) == 56


def test_an_odd_length_attribute_is_padded_but_its_length_is_not() -> None:
    assert netlink.pack_attr(9, b"abc") == struct.pack("=HH", 7, 9) + b"abc\0"
    assert netlink.pack_attr(9, b"") == struct.pack("=HH", 4, 9)
    msg = netlink.pack_message(0x0301, 1, 3, b"x")
    assert msg == nlmsghdr(17, 0x0301, 1, 3) + b"x\0\0\0"


# -- parsing ------------------------------------------------------------------------------------
def test_a_datagram_of_packets_and_answers_splits_into_its_messages() -> None:
    nested_ct = nlattr(11 | 0x8000, nlattr(1, b"\1\2\3\4"))  # NLA_F_NESTED is masked off
    outdev = nlattr(6, (2).to_bytes(4, "big"))
    datagram = (
        packet_message(7, 0x01020304, extra=outdev + nested_ct)
        + packet_message(7, 5)
        + error_message(0, 41)
        + error_message(1, 42)  # EPERM
    )
    msgs = netlink.split_messages(datagram)
    assert [m.type for m in msgs] == [QUEUE_PACKET, QUEUE_PACKET, NLMSG_ERROR, NLMSG_ERROR]
    first = netlink.parse_packet(msgs[0].payload)
    assert first == netlink.PacketHeader(queue=7, packet_id=0x01020304, hw_protocol=0x0800, hook=3)
    assert netlink.parse_packet(msgs[1].payload).packet_id == 5
    assert netlink.parse_error(msgs[2].payload) == (0, 41)
    assert netlink.parse_error(msgs[3].payload) == (1, 42)
    attrs = netlink.parse_attrs(msgs[0].payload[4:])
    assert attrs[6] == (2).to_bytes(4, "big") and 11 in attrs and len(attrs[1]) == 7


def test_a_packet_id_is_in_network_byte_order() -> None:
    [msg] = netlink.split_messages(packet_message(0, 0x00000100))
    assert netlink.parse_packet(msg.payload).packet_id == 256


def test_malformed_messages_are_refused() -> None:
    good = packet_message(7, 1)
    with pytest.raises(ValueError):
        netlink.split_messages(good[:-4])  # shorter than its header says
    with pytest.raises(ValueError):
        netlink.split_messages(nlmsghdr(8, 0x300, 0, 0))  # a length below the header's
    with pytest.raises(ValueError):
        netlink.parse_packet(nfgenmsg(2, 7) + nlattr(6, b"\0\0\0\2"))  # no packet header
    with pytest.raises(ValueError):
        netlink.parse_error(b"\0\0\0\0")
    assert netlink.split_messages(b"") == []


# -- the queue client, on a stand-in socket --------------------------------------------------
class FakeSocket:
    """Hands out scripted datagrams (or raises scripted errors), ``replies[n]`` once the
    n-th datagram (from 1) was sent, and records what is sent; its fileno is a pipe that
    is always readable."""

    def __init__(
        self,
        incoming: list[bytes | OSError],
        replies: dict[int, list[bytes | OSError]] | None = None,
    ):
        self.incoming = list(incoming)
        self.replies = replies or {}
        self.sent: list[bytes] = []
        self.r, self.w = os.pipe()
        os.write(self.w, b"x")

    def send(self, data: bytes, /) -> int:
        self.sent.append(bytes(data))
        self.incoming += self.replies.get(len(self.sent), [])
        return len(data)

    def recv_into(self, buffer: bytearray, /) -> int:
        if not self.incoming:
            raise BlockingIOError(errno.EAGAIN, "no datagram")
        item = self.incoming.pop(0)
        if isinstance(item, OSError):
            raise item
        buffer[: len(item)] = item
        return len(item)

    def fileno(self) -> int:
        return self.r

    def close(self) -> None:
        os.close(self.r)
        os.close(self.w)


def verdicts_sent(sock: FakeSocket) -> list[tuple[int, int]]:
    """(verdict, packet id) of every verdict message sent, in order."""
    out = []
    for datagram in sock.sent:
        for msg in netlink.split_messages(datagram):
            if msg.type == QUEUE_VERDICT:
                verdict, packet_id = struct.unpack("!II", msg.payload[8:16])
                out.append((verdict, packet_id))
    return out


def test_receive_reads_every_message_of_every_datagram_and_counts_enobufs() -> None:
    sock = FakeSocket(
        [
            packet_message(7, 1) + packet_message(7, 2),
            OSError(errno.ENOBUFS, "No buffer space available"),
            packet_message(7, 3) + error_message(0, 0),
            error_message(errno.ENOENT, 0),  # a verdict for an unknown id: counted, logged
            packet_message(7, 4),
        ]
    )
    nfq = nfqueue.NfQueue(7, sock)
    assert nfq.receive() == [1, 2, 3, 4]
    assert nfq.enobufs == 1 and nfq.verdict_errors == 1
    assert nfq.receive() == []
    sock.close()


def test_verdicts_share_datagrams() -> None:
    sock = FakeSocket([])
    nfq = nfqueue.NfQueue(7, sock)
    nfq.verdicts(range(common.VERDICTS_PER_SEND + 3), netlink.NF_ACCEPT)
    nfq.verdicts([77], netlink.NF_DROP)
    assert [len(d) // 32 for d in sock.sent] == [common.VERDICTS_PER_SEND, 3, 1]
    assert verdicts_sent(sock)[-1] == (netlink.NF_DROP, 77)
    assert verdicts_sent(sock)[:2] == [(netlink.NF_ACCEPT, 0), (netlink.NF_ACCEPT, 1)]
    sock.close()


def test_bind_waits_for_each_ack_and_passes_a_leftover_rules_packets() -> None:
    sock = FakeSocket(
        [],
        replies={
            1: [packet_message(7, 50) + error_message(0, 1)],  # a packet before the ack
            3: [error_message(0, 2)],  # (the 2nd datagram sent is the packet's verdict)
        },
    )
    nfqueue.NfQueue(7, sock).bind(maxlen=4096)
    binds = [d for d in sock.sent if d[4:6] == struct.pack("=H", QUEUE_CONFIG)]
    assert binds == [netlink.bind_request(7, 1), netlink.params_request(7, 2, maxlen=4096)]
    assert verdicts_sent(sock) == [(netlink.NF_ACCEPT, 50)]
    sock.close()


def test_a_refused_bind_is_one_line() -> None:
    sock = FakeSocket([], replies={1: [error_message(errno.EOPNOTSUPP, 1)]})
    with pytest.raises(FleetError) as e:
        nfqueue.NfQueue(3, sock).bind()
    assert "\n" not in str(e.value) and "binding queue 3" in str(e.value)
    assert "CONFIG_NETFILTER_NETLINK_QUEUE" in str(e.value)
    sock.close()


# -- the impairment -----------------------------------------------------------------------------
@pytest.mark.parametrize(
    "kwargs",
    [
        {"delay_ms": -1},
        {"jitter_ms": -0.5},
        {"loss_pct": -1},
        {"loss_pct": 100.5},
        {"delay_ms": float("nan")},
        {"jitter_ms": float("inf")},
    ],
)
def test_an_impossible_impairment_is_refused_in_one_line(kwargs: dict[str, float]) -> None:
    with pytest.raises(FleetError) as e:
        Impairment(**kwargs)
    assert "\n" not in str(e.value) and next(iter(kwargs)) in str(e.value)


def test_jitter_may_exceed_the_delay_and_loss_may_be_total() -> None:
    Impairment(delay_ms=5, jitter_ms=10, loss_pct=100)
    Impairment()


# -- the scheduler ------------------------------------------------------------------------------
def test_a_seed_gives_an_exact_drop_count() -> None:
    s = Scheduler(Impairment(loss_pct=30), seed=42)
    dropped = [i for i in range(10_000) if s.admit(i, i * MS) is None]
    rng = random.Random(42)  # the documented draw: one random() per packet, < loss / 100
    assert len(dropped) == sum(rng.random() < 0.30 for _ in range(10_000)) == 2964
    assert s.counts == Counts(packets=10_000, dropped=2964, delayed=0, enobufs=0)
    again = Scheduler(Impairment(loss_pct=30), seed=42)
    assert [i for i in range(10_000) if again.admit(i, i * MS) is None] == dropped


def test_no_loss_drops_nothing_and_full_loss_drops_everything() -> None:
    kept = Scheduler(Impairment(delay_ms=1), seed=1)
    assert all(kept.admit(i, 0) == MS for i in range(1000))
    lost = Scheduler(Impairment(loss_pct=100), seed=1)
    assert all(lost.admit(i, 0) is None for i in range(1000)) and lost.held == 0


def test_zero_jitter_releases_after_exactly_the_delay() -> None:
    s = Scheduler(Impairment(delay_ms=40), seed=3)
    arrivals = [0, 1, 7 * MS, 7 * MS, 123_456_789]
    releases = [s.admit(i, t) for i, t in enumerate(arrivals)]
    assert releases == [t + 40 * MS for t in arrivals]
    assert s.counts.delayed == 5 and s.held == 5
    assert s.due(40 * MS) == [0]
    assert s.due(47 * MS) == [1, 2, 3]  # ties in arrival order
    assert s.next_release_ns() == 123_456_789 + 40 * MS
    assert s.due(10**12) == [4] and s.next_release_ns() is None


def test_no_delay_releases_at_once_and_counts_nothing_delayed() -> None:
    s = Scheduler(Impairment(), seed=0)
    assert s.admit(9, 500) == 500 and s.due(500) == [9]
    assert s.counts == Counts(packets=1, dropped=0, delayed=0, enobufs=0)


def test_every_release_is_within_delay_plus_or_minus_jitter_and_spread_over_it() -> None:
    s = Scheduler(Impairment(delay_ms=40, jitter_ms=10), seed=11)
    delays = []
    for i in range(5000):
        arrival = 1_000 * MS + i * 137
        release = s.admit(i, arrival)
        assert release is not None
        delays.append(release - arrival)
    assert min(delays) >= 30 * MS and max(delays) <= 50 * MS
    assert min(delays) < 30.1 * MS and max(delays) > 49.9 * MS  # uniform over the range
    assert abs(sum(delays) / len(delays) - 40 * MS) < 0.5 * MS


def test_jitter_beyond_the_delay_is_clamped_at_zero() -> None:
    s = Scheduler(Impairment(delay_ms=5, jitter_ms=10), seed=5)
    delays = [s.admit(i, 0) for i in range(4000)]
    assert all(d is not None and 0 <= d <= 15 * MS for d in delays)
    zero = sum(d == 0 for d in delays) / len(delays)  # P(uniform(-5, 15) < 0) = 1/4
    assert 0.2 < zero < 0.3
    assert s.counts.delayed == sum(d != 0 for d in delays)


def test_jitter_reorders_packets_by_their_release_times() -> None:
    s = Scheduler(Impairment(delay_ms=20, jitter_ms=10), seed=8)
    release: dict[int, int] = {}
    for i in range(200):
        r = s.admit(i, i * MS)
        assert r is not None
        release[i] = r
    out: list[int] = []
    for now in range(0, 300 * MS, MS // 2):
        due = s.due(now)
        assert all(release[i] <= now for i in due)
        out += due
    assert sorted(out) == list(range(200))
    assert out == sorted(release, key=lambda i: (release[i], i))
    assert out != list(range(200))  # overtaking happened


def test_release_all_empties_the_queue_in_release_order() -> None:
    s = Scheduler(Impairment(delay_ms=10, jitter_ms=5, loss_pct=10), seed=2)
    kept = {i: r for i in range(100) if (r := s.admit(i, 0)) is not None}
    assert s.held == len(kept) == s.counts.packets - s.counts.dropped
    assert s.release_all() == sorted(kept, key=lambda i: (kept[i], i))
    assert s.held == 0 and s.due(10**12) == [] and s.next_release_ns() is None


def test_loss_and_jitter_draws_replay_from_the_seed() -> None:
    imp = Impairment(delay_ms=10, jitter_ms=4, loss_pct=20)
    s = Scheduler(imp, seed=99)
    got = [s.admit(i, 0) for i in range(500)]
    rng = random.Random(99)  # per packet: random() for the loss, then uniform() if kept
    expected: list[int | None] = []
    for _ in range(500):
        if rng.random() < 0.2:
            expected.append(None)
        else:
            expected.append(max(0, round(rng.uniform(6, 14) * MS)))
    assert got == expected


def test_counts_round_trip_through_their_line() -> None:
    c = Counts(packets=10, dropped=2, delayed=8, enobufs=1)
    line = c.to_line()
    assert "\n" not in line
    assert json.loads(line) == {"packets": 10, "dropped": 2, "delayed": 8, "enobufs": 1}
    assert Counts.from_line(line) == c


# -- the command line ---------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        ([], "--dev and --queue are required"),
        (["--dev", "eth0"], "--dev and --queue are required"),
        (["--queue", "7"], "--dev and --queue are required"),
        (["--dev", "eth0", "--queue", "70000"], "queue 70000"),
        (["--dev", "eth0", "--queue", "-1"], "queue -1"),
        (["--dev", "eth0", "--queue", "x"], "--queue"),
        (["--dev", "eth0", "--queue", "7", "--delay-ms", "-1"], "--delay-ms"),
        (["--dev", "eth0", "--queue", "7", "--jitter-ms", "nan"], "--jitter-ms"),
        (["--dev", "eth0", "--queue", "7", "--loss-pct", "101"], "--loss-pct"),
        (["--dev", "lo", "--queue", "7"], "loopback"),
        (["--dev", "eth+", "--queue", "7"], "eth+"),
        (["--dev", "a-very-long-name0", "--queue", "7"], "a-very-long-name0"),
        (["--dev", "eth0", "--queue", "7", "--bogus"], "--bogus"),
        (["--remove-only", "--queue", "99999"], "queue 99999"),
    ],
)
def test_a_bad_argument_is_one_line_and_exit_2(
    argv: list[str], needle: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main.main(argv) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err.count("\n") == 1 and needle in err, err


def test_the_command_line_parses_back_to_its_options() -> None:
    imp = Impairment(delay_ms=50, jitter_ms=10.5, loss_pct=2)
    cmd = main.command("eth0", 7, imp, seed=3)
    assert cmd[:3] == ["python3", "-m", "mqlab.faults.impairer"]
    assert main.parse_args(cmd[3:]) == Options("eth0", 7, imp, 3)
    assert main.parse_args(main.command("veth1", 0, Impairment())[3:]) == Options(
        "veth1", 0, Impairment(), None
    )
    assert main.parse_args(main.remove_only_command()[3:]) == RemoveOnly(None)
    assert main.parse_args(main.remove_only_command(4)[3:]) == RemoveOnly(4)


# -- iptables -----------------------------------------------------------------------------------
RULE_7 = (
    "-A OUTPUT -o eth0 -m comment --comment mqlab-impair-7 -j NFQUEUE --queue-num 7 --queue-bypass"
)


def test_the_rule_queues_one_devices_egress_and_bypasses_when_nobody_listens() -> None:
    assert rules.add_command("eth0", 7) == [
        "iptables", "-w", "-I", "OUTPUT", "-o", "eth0", "-m", "comment", "--comment",
        "mqlab-impair-7", "-j", "NFQUEUE", "--queue-num", "7", "--queue-bypass",
    ]  # fmt: skip
    assert rules.list_command() == ["iptables", "-w", "-S", "OUTPUT"]
    with pytest.raises(FleetError, match="loopback"):
        rules.add_command("lo", 7)


LISTING = "\n".join(
    [
        "-P OUTPUT ACCEPT",
        RULE_7,
        "-A OUTPUT -o eth1 -m comment --comment mqlab-impair-8 -j NFQUEUE --queue-num 8 "
        "--queue-bypass",
        '-A OUTPUT -o eth0 -m comment --comment "mqlab-impair-9" -j NFQUEUE --queue-num 9',
        "-A OUTPUT -o eth0 -m comment --comment mqlab-impair-7x -j ACCEPT",
        '-A OUTPUT -o eth0 -m comment --comment "someone\'s rule" -j ACCEPT',
        "-A OUTPUT -p udp -m udp --dport 9 -j ACCEPT",
        "-A INPUT -m comment --comment mqlab-impair-7 -j ACCEPT",
    ]
)


def test_only_mqlabs_rules_are_deleted() -> None:
    everything = rules.delete_commands(LISTING)
    assert [c[3:] for c in everything] == [
        RULE_7.split()[1:],
        ["OUTPUT", "-o", "eth1", "-m", "comment", "--comment", "mqlab-impair-8", "-j",
         "NFQUEUE", "--queue-num", "8", "--queue-bypass"],
        ["OUTPUT", "-o", "eth0", "-m", "comment", "--comment", "mqlab-impair-9", "-j",
         "NFQUEUE", "--queue-num", "9"],
    ]  # fmt: skip
    assert all(c[:3] == ["iptables", "-w", "-D"] for c in everything)
    assert rules.delete_commands(LISTING, 7) == [["iptables", "-w", "-D", *RULE_7.split()[1:]]]
    assert rules.delete_commands(LISTING, 5) == []
    assert rules.delete_commands("-P OUTPUT ACCEPT\n") == []


# A stand-in iptables: the OUTPUT chain's rules, one per line, in $FAKE_RULES; -I prepends,
# -D deletes an exact match (exit 1 when there is none, as iptables does), -S lists.
FAKE_IPTABLES = """#!{python}
import os, shlex, sys
path = os.environ["FAKE_RULES"]
with open(os.environ["FAKE_LOG"], "a") as log:
    log.write(shlex.join(sys.argv[1:]) + "\\n")
if os.environ.get("FAKE_REFUSE"):
    print("iptables v1.8.9 (nf_tables): Couldn't load target `NFQUEUE'", file=sys.stderr)
    print("Try `iptables -h' or 'iptables --help' for more information.", file=sys.stderr)
    sys.exit(2)
rules = open(path).read().splitlines() if os.path.exists(path) else []
args = sys.argv[1:]
assert args[0] == "-w", args
verb, spec = args[1], shlex.join(args[3:])
if verb == "-S":
    print("-P OUTPUT ACCEPT")
    for r in rules:
        print("-A OUTPUT " + r)
elif verb == "-I":
    rules.insert(0, spec)
elif verb == "-D":
    if spec not in rules:
        print("iptables: Bad rule (does a matching rule exist in that chain?).", file=sys.stderr)
        sys.exit(1)
    rules.remove(spec)
open(path, "w").write("".join(r + "\\n" for r in rules))
"""


@pytest.fixture
def fake_iptables(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    exe = bin_dir / "iptables"
    exe.write_text(FAKE_IPTABLES.format(python=sys.executable))
    exe.chmod(0o755)
    rules = tmp_path / "rules"
    monkeypatch.setenv("PATH", str(bin_dir))
    monkeypatch.setenv("FAKE_RULES", str(rules))
    monkeypatch.setenv("FAKE_LOG", str(tmp_path / "log"))
    rules.write_text("-p udp -m udp --dport 9 -j ACCEPT\n")
    return rules


def test_add_then_remove_leaves_the_other_rules_and_removing_again_is_harmless(
    fake_iptables: Path,
) -> None:
    rules.add_rule("eth0", 7)
    rules.add_rule("eth1", 8)
    lines = fake_iptables.read_text().splitlines()
    assert lines[1] == " ".join(RULE_7.split()[2:]) and len(lines) == 3
    assert rules.remove_rules(7) == 1
    assert rules.remove_rules(7) == 0
    assert rules.remove_rules() == 1  # queue 8's
    assert fake_iptables.read_text() == "-p udp -m udp --dport 9 -j ACCEPT\n"
    assert rules.remove_rules() == 0


def test_a_refusing_kernel_is_one_line_naming_the_fix(
    fake_iptables: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("FAKE_REFUSE", "1")
    with pytest.raises(FleetError) as e:
        rules.add_rule("eth0", 7)
    text = str(e.value)
    assert "\n" not in text and "Couldn't load target `NFQUEUE'" in text
    assert "CONFIG_NETFILTER_XT_TARGET_NFQUEUE" in text and "root" in text
    assert main.main(["--remove-only"]) == 2
    assert capsys.readouterr().err.count("\n") == 1


def test_missing_iptables_says_install_debians_iptables(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    for call in (lambda: rules.add_rule("eth0", 7), rules.remove_rules):
        with pytest.raises(FleetError) as e:
            call()
        assert "\n" not in str(e.value) and "install Debian's iptables" in str(e.value)


def test_loopback_is_impaired_only_when_asked_and_in_a_namespace_of_its_own(
    tmp_path: Path,
) -> None:
    """``--loopback-here`` (bench/lanes.py) allows ``lo`` only in a network namespace whose
    one link is loopback; without it, never."""
    args = ["--dev", "lo", "--queue", "3", "--delay-ms", "5"]
    with pytest.raises(FleetError, match="loopback is never impaired"):
        main.parse_args(args)
    assert not common.only_loopback()  # the tests run in the machine's namespace
    with pytest.raises(FleetError, match="loopback is never impaired"):
        main.parse_args([*args, "--loopback-here"])
    if os.geteuid() != 0:
        pytest.fail("the namespace half needs root (the suite runs as root)")
    ns = f"mqlab-test-lo-{os.getpid()}"
    import subprocess

    subprocess.run(["ip", "netns", "add", ns], check=True)
    try:
        code = (
            "from mqlab.faults.impairer import main; "
            f"print(main.parse_args({[*args, '--loopback-here']!r}).dev)"
        )
        out = subprocess.run(
            ["ip", "netns", "exec", ns, sys.executable, "-c", code],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert out.returncode == 0, out.stderr
        assert out.stdout.strip() == "lo"
    finally:
        subprocess.run(["ip", "netns", "del", ns], check=False)
