"""What a fault cost, on timelines whose answers are counted by hand."""

from __future__ import annotations

from typing import Any

from mqlab.analysis import faults


def _row(second: int, confirmed: int = 100, received: int = 100, **kw: Any) -> dict[str, Any]:
    row = {
        "second_ms": 1_000_000 + second * 1000,
        "confirmed": confirmed,
        "received": received,
        "failed": 0,
        "send_msg_us_count": confirmed,
        "send_msg_us_p99": 10_000,
        "processing_us_count": received,
        "processing_us_p99": 20_000,
    }
    row.update(kw)
    return row


T0 = 1_000_000  # the timeline's first second (ms)


def _timeline() -> list[dict[str, Any]]:
    rows = [_row(s) for s in range(20)]
    for s in (5, 6, 7):  # nothing confirmed, sends failing
        rows[s] = _row(s, confirmed=0, received=0 if s else 100, failed=2)
    rows[8] = _row(8, received=0)
    # send p99 after the fault: 50 ms (over 2 x 10 ms), then 15 ms for good
    rows[8]["send_msg_us_p99"] = 50_000
    rows[9]["send_msg_us_p99"] = 50_000
    for s in range(10, 20):
        rows[s]["send_msg_us_p99"] = 15_000
    # processing p99: 30 ms (within 2 x 20 ms) from the first second with values
    for s in range(9, 20):
        rows[s]["processing_us_p99"] = 30_000
    rows[6]["repeats"] = 4  # in the fault
    rows[12]["repeats"] = 9  # after it
    return rows


def test_the_cost_of_one_fault_counted_by_hand() -> None:
    log = [
        {"action": "kill_leader", "node": 2, "at_ms": T0 + 5_300},
        {"action": "restart_node", "node": 2, "at_ms": T0 + 8_100},
    ]
    [f] = faults.figures(log, _timeline())
    assert f == {
        "fault_index": 0,
        "action": "kill_leader",
        "kind": "",
        "node": 2,
        "label": "kill leader (node 2)",
        "start_ms": T0 + 5_300,
        "end_ms": T0 + 8_100,
        "unavailable_send_s": 3,  # seconds 5, 6, 7
        "unavailable_receive_s": 4,  # seconds 5 .. 8
        "send_p99_recovered_s": 5,  # second 10: 15 ms <= 20 ms there and after
        "processing_p99_recovered_s": 4,  # second 9, the first with values after the fault
        "failed": 6,  # 2 in each of seconds 5, 6, 7 (the fault lasts into second 8)
        "repeats": 4,  # second 6's; second 12's came after it
    }
    assert faults.longest_gap_s(_timeline(), "confirmed") == 3
    assert faults.longest_gap_s(_timeline(), "received") == 4


def test_no_level_before_the_fault_or_none_after_is_unknown_not_zero() -> None:
    rows = _timeline()
    log = [{"action": "pause_node", "node": 0, "at_ms": T0}]  # nothing before second 0
    [f] = faults.figures(log, rows)
    assert f["send_p99_recovered_s"] is None and f["end_ms"] is None
    for r in rows[10:]:
        r["send_msg_us_p99"] = 99_000  # never back within 2 x 10 ms
    [g] = faults.figures([{"action": "pause_node", "node": 0, "at_ms": T0 + 5_000}], rows)
    assert g["send_p99_recovered_s"] is None
    assert g["failed"] == 6  # to the end of the run: it was never resumed


def test_windows_pair_each_fault_with_what_ends_it() -> None:
    log = [
        {"action": "partition", "partition": "node_from_brokers", "node": 1, "at_ms": 100},
        {"action": "crash_all", "node": 0, "nodes": 2, "at_ms": 200},
        {"action": "heal", "at_ms": 300},
        {"action": "restart_node", "node": 0, "at_ms": 400},
        {"action": "restart_node", "node": 1, "at_ms": 450},
        {"action": "restart_node", "node": 1, "at_ms": 900},
    ]
    got = [(w["label"], w["start_ms"], w["end_ms"]) for w in faults.windows(log)]
    assert got == [
        ("partition: node 1 from brokers", 100, 300),
        ("crash of every node", 200, 450),
        ("restart node 1", 900, 900),
    ]


def test_a_run_without_gaps_or_faults() -> None:
    rows = [_row(s) for s in range(5)]
    assert faults.figures([], rows) == []
    assert faults.longest_gap_s(rows, "confirmed") == 0
    assert faults.longest_gap_s([], "received") == 0
    # a missing second inside the run counts as a second without any
    assert faults.longest_gap_s([rows[0], rows[3]], "confirmed") == 2


def test_the_report_states_each_fault_and_the_gaps() -> None:
    from pathlib import Path

    from mqlab.report.model import section_markdown
    from mqlab.report.run_report import RunReport, faults_section

    def shown(rows: Any) -> str:
        return "\n".join(section_markdown(faults_section(RunReport(run, Path("."), faults=rows))))

    log = [
        {"action": "kill_leader", "node": 2, "at_ms": T0 + 5_300},
        {"action": "restart_node", "node": 2, "at_ms": T0 + 8_100},
    ]
    run = {"measure_start_ms": T0, "longest_gap_send_s": 3, "longest_gap_receive_s": 4}
    text = shown(faults.figures(log, _timeline()))
    assert "| kill leader (node 2) | 5.3 s | 8.1 s | 3 s | 4 s | 5 s | 4 s | 6 | unknown" in text
    assert "without a confirmed send: 3 s; without a received message: 4 s." in text
    assert "None injected." in shown([])
    assert "predates fault figures" in shown(None)


def test_the_messages_of_a_fault_lost_and_recovered_counted_by_hand() -> None:
    from types import SimpleNamespace

    from pyroaring import BitMap64

    from mqlab.analysis import partials
    from mqlab.analysis.delivery import fault_messages
    from mqlab.archive import codecs
    from mqlab.archive.codecs import encode_bitmap

    def bm(seqs: Any) -> str:
        return encode_bitmap(BitMap64(seqs))

    # sender 1 hands out 10 seqs a second from second 0 (seqs 0..49 over 5 s);
    # the fault lasts from 2.5 s to 3.2 s: its seconds 2 and 3 hold seqs 20..39
    marks = [[T0 + s * 1000, s * 10] for s in range(5)]
    confirmed = set(range(50)) - {25, 26, 27}  # 3 sends failed in the fault
    received = set(range(50)) - {21, 22, 23, 26, 27, 45}  # 25 recovered; 21-23, 45 missing
    # two receiver nodes: node A got 24 twice and 30 once, node B got 30 and 31 and 44;
    # merged as the job merges them, 24 (again on A), 30 (on A and B) and 44 (on B twice)
    # were delivered more than once; 31 only once (only B got it)
    node_a = {"bitmap": bm(received - {31, 44}), "again_bitmap": bm([24])}
    node_b = {"bitmap": bm([30, 31, 44]), "again_bitmap": bm([44])}
    merged = partials._merge_records("rcv", [node_a, node_b])
    assert codecs.decode_bitmap(merged["multi_bitmap"]) == BitMap64([24, 30, 44])
    results = {
        ("snt", "r", 1): {"sent": 50, "confirmed_bitmap": bm(confirmed), "marks": marks},
        ("rcv", "r", 1): merged,
        ("und", "r"): {"count": 1, "senders": {"1": bm([23])}},  # 23 still in the broker
    }
    rows = [{"start_ms": T0 + 2_500, "end_ms": T0 + 3_200}, {"start_ms": T0, "end_ms": None}]
    got = fault_messages(results, SimpleNamespace(run_id="r"), rows, {})
    assert got == [
        # lost 21, 22 (23 is undrained); 25 back; 24 and 30 twice (44 is not of its seconds)
        {"sent": 20, "lost": 2, "recovered": 1, "duplicated": 2},
        {"sent": 50, "lost": 3, "recovered": 1, "duplicated": 3},  # the run: 45 lost, 44 twice
    ]
    # a receiver's record from before it kept what it got again: duplicated unknown
    old = partials._merge_records("rcv", [node_a, {"bitmap": bm([30, 31, 44])}])
    results[("rcv", "r", 1)] = old
    assert fault_messages(results, SimpleNamespace(run_id="r"), rows[:1], {}) == [
        {"sent": 20, "lost": 2, "recovered": 1, "duplicated": None}
    ]
    # an archive without marks, or with sends unknown: unknown, never 0
    del results[("snt", "r", 1)]["marks"]
    assert fault_messages(results, SimpleNamespace(run_id="r"), rows[:1], {}) == [
        {"sent": None, "lost": None, "recovered": None, "duplicated": None}
    ]


def test_an_outage_lasts_at_most_until_the_senders_stop() -> None:
    # sends fail from second 4 on, the senders stop after second 6; receivers drain to 9
    rows = [_row(s) for s in range(10)]
    for s in range(4, 10):
        rows[s] = _row(s, confirmed=0, failed=3 if s <= 6 else 0)
    [f] = faults.figures([{"action": "crash_all", "nodes": 3, "at_ms": T0 + 4_000}], rows)
    assert f["unavailable_send_s"] == 3  # seconds 4, 5, 6: not the drain after them
    assert f["unavailable_receive_s"] == 0


def test_a_busy_first_second_does_not_hide_the_outage_after_it() -> None:
    rows = [_row(s) for s in range(10)]
    for s in (4, 5, 6):
        rows[s] = _row(s, confirmed=0, received=0)
    # struck at 3.8 s: second 3 was busy before it, seconds 4-6 are quiet
    [f] = faults.figures([{"action": "crash_all", "nodes": 3, "at_ms": T0 + 3_800}], rows)
    assert (f["unavailable_send_s"], f["unavailable_receive_s"]) == (3, 3)


def test_the_durability_matrix_puts_each_fault_in_its_column() -> None:
    from mqlab.report import sweep
    from mqlab.report.model import section_markdown

    nats = {"broker": "nats", "profile": "nats-r3"}
    redis = {"broker": "redis", "profile": "redis-async"}

    def f(action: str, lost: int | None, dup: int, quiet: int, kind: str = "") -> dict:
        return {
            "action": action,
            "kind": kind,
            "lost": lost,
            "duplicated": dup,
            "unavailable_send_s": quiet,
        }

    matrix = sweep.fault_matrix(
        [
            (nats, [f("kill_leader", 0, 3, 2), f("crash_all", 0, 0, 4)]),
            (
                redis,
                [f("kill_leader", 17, 0, 5), f("partition", None, 1, 0, "x")],
            ),
            ({"broker": "pg", "profile": "postgres-sync"}, None),
        ]
    )
    assert matrix is not None
    text = "\n".join(section_markdown(matrix))
    assert "| broker | profile | kill_leader | crash_all | partition: x |" in text
    assert (
        "| nats | nats-r3 | lost 0 · duplicated 3 · 2 s | lost 0 · duplicated 0 · 4 s | – |" in text
    )
    assert (
        "| redis | redis-async | lost 17 · duplicated 0 · 5 s | – "
        "| lost unknown · duplicated 1 · 0 s |" in text
    )
    assert "| pg | postgres-sync | unknown | unknown | unknown |" in text
    assert sweep.fault_matrix([(nats, [])]) is None


def test_a_fault_struck_behind_a_backlog_has_a_column_of_its_own() -> None:
    """The same partition at a low fixed rate and at full rate with receivers behind: two
    columns (the backlog one last), each run's cell in its own."""
    from mqlab.report import sweep
    from mqlab.report.model import section_markdown

    cut = {"action": "partition", "kind": "leader_from_brokers", "duplicated": 0}
    slow = {"broker": "redis", "profile": "redis-async", "receivers_behind": False}
    behind = {"broker": "redis", "profile": "redis-async", "receivers_behind": True}
    wait1 = {"broker": "redis", "profile": "redis-wait1", "receivers_behind": True}
    matrix = sweep.fault_matrix(
        [
            (behind, [{**cut, "lost": 1_875_851, "unavailable_send_s": 0}]),
            (slow, [{**cut, "lost": 0, "unavailable_send_s": 2}]),
            (wait1, [{**cut, "lost": 0, "unavailable_send_s": 9}]),
        ]
    )
    assert matrix is not None
    text = "\n".join(section_markdown(matrix))
    assert (
        "| broker | profile | partition: leader_from_brokers "
        "| partition: leader_from_brokers (receivers behind) |" in text
    )
    assert "| redis | redis-async | – | lost 1,875,851 · duplicated 0 · 0 s |" in text
    assert "| redis | redis-async | lost 0 · duplicated 0 · 2 s | – |" in text
    assert "| redis | redis-wait1 | – | lost 0 · duplicated 0 · 9 s |" in text
    assert "receivers were behind" in text
