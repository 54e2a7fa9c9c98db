"""bench/clients.py: the figures it prints, computed from the tools' raw output."""

from __future__ import annotations

import sys

import pytest

from bench.clients import (
    PRODUCED,
    BenchError,
    Comparison,
    Measured,
    artemis_perf_counter,
    backlog_window,
    check_stored,
    consumed_counter,
    format_table,
    goal_line,
    nul_free,
    parse_nats_bench,
    parse_pgbench,
    parse_redis_benchmark_csv,
    perftest_sample,
    perftest_steady,
    pgbench_claim_script,
    pgbench_insert_script,
    pulsar_produced,
    rocketmq_counter,
    rolling_window,
    summarize_stacks,
    window_count,
    windowed_tool,
)
from mqlab.archive.codecs import COUNT_FIELDS, CountsRow
from mqlab.brokers.postgres.database import claim_sql, insert_sql

REDIS_CSV = (
    '"test","rps","avg_latency_ms","min_latency_ms","p50_latency_ms","p95_latency_ms",'
    '"p99_latency_ms","max_latency_ms"\n'
    '"XADD bench-native-1 * m","53951.98","1.443","0.064","0.991","4.127","9.527","36.511"\n'
)

PGBENCH_OUT = """pgbench (18.6)
transaction type: insert.sql
scaling factor: 1
query mode: prepared
number of clients: 8
number of threads: 1
maximum number of tries: 1
duration: 8 s
number of transactions actually processed: 13402
number of failed transactions: 0 (0.000%)
latency average = 4.772 ms
initial connection time = 10.406 ms
tps = 1676.466032 (without initial connection time)
"""


def test_redis_benchmark_rps_is_read_from_its_csv() -> None:
    assert parse_redis_benchmark_csv(REDIS_CSV) == pytest.approx(53951.98)


def test_redis_benchmark_output_without_a_result_is_an_error() -> None:
    with pytest.raises(Exception, match="unexpected output"):
        parse_redis_benchmark_csv("ERR unknown command\n")


# the end of `nats bench js pub async` (natscli v0.5.0) as it printed it here
NATS_BENCH_OUT = """  [8] 789 msgs/sec ~ 790 KiB/sec ~ min: 640.22us ~ avg: 12,664.90us (2,500 msgs)

 NATS JetStream asynchronous publisher aggregated stats: 6,230 msgs/sec ~ 6.1 MiB/sec
 message rates min 779 | avg 853 | max 881 | stddev 40 msgs
"""


def test_nats_bench_rate_is_its_aggregated_line_not_a_clients() -> None:
    assert parse_nats_bench(NATS_BENCH_OUT) == 6230.0
    with pytest.raises(BenchError, match="unexpected output"):
        parse_nats_bench("nats: error: nats: no servers available for connection\n")


# PerfTest 2.22.1's lines as it printed them here (producers only; consumers only)
PERFTEST_SEND = (
    "id: test-170415-594, time 5.000 s, sent: 2749 msg/s, confirmed: 2749 msg/s, nacked: 0 "
    "msg/s, min/median/75th/95th/99th confirm latency: 2519/25651/39861/66007/82643 µs"
)
PERFTEST_RECEIVE = (
    "id: test-171002-101, time 2.000 s, received: 3129 msg/s, min/median/75th/95th/99th "
    "consumer latency: 2008/20259/35463/58595/72400 µs"
)


def test_perftest_lines_give_the_second_and_the_rate_asked_for() -> None:
    assert perftest_sample(PERFTEST_SEND, "confirmed") == (5.0, 2749.0)
    assert perftest_sample(PERFTEST_SEND, "received") is None
    assert perftest_sample(PERFTEST_RECEIVE, "received") == (2.0, 3129.0)
    assert perftest_sample("id: test-170415-594, sending rate avg: 2075 msg/s", "sent") is None


def test_perftest_steady_state_leaves_the_first_second_out() -> None:
    # (its time, msgs/s that second, its CPU seconds so far): the first line is the JVM
    # starting; from there, 1 s at 1,000, 2 s at 2,000 (a line after a 2 s gap), 1 s at 500
    samples = [(1.0, 9_999.0, 3.0), (2.0, 1_000.0, 3.5), (4.0, 2_000.0, 4.5), (5.0, 500.0, 5.0)]
    assert perftest_steady(samples) == (1_000 + 4_000 + 500, 4.0, 2.0)
    with pytest.raises(BenchError, match="fewer than 3"):
        perftest_steady(samples[:2])


def test_pgbench_tps_and_transactions() -> None:
    assert parse_pgbench(PGBENCH_OUT) == (pytest.approx(1676.466032), 13402)
    with pytest.raises(Exception, match="unexpected output"):
        parse_pgbench("pgbench: error: connection refused\n")


def test_the_insert_script_is_the_drivers_statement_with_a_payload_variable() -> None:
    text = insert_sql("jobs", 3).as_bytes(None).decode()
    script = pgbench_insert_script(text)
    assert script == 'INSERT INTO "jobs" (payload) VALUES (:payload), (:payload), (:payload);\n'
    with pytest.raises(ValueError):
        pgbench_insert_script("SELECT 1")


def test_the_claim_script_keeps_the_drivers_claim_and_deletes_what_it_claimed() -> None:
    text = claim_sql("jobs").as_bytes(None).decode()
    script = pgbench_claim_script(text, '"jobs"')
    lines = script.splitlines()
    # the driver's row pick, unchanged, with the limit from :batch
    assert script.startswith(text.split("\nUPDATE ")[0].replace("%s", ":batch"))
    assert "FOR UPDATE SKIP LOCKED" in script and "%s" not in script
    # the driver's UPDATE (visibility from :visibility) as a CTE whose rows are aggregated
    assert 'claimed AS (UPDATE "jobs" AS j SET next_delivery = now() + ' in script
    assert "make_interval(secs => :visibility)" in script
    assert "RETURNING j.id, j.payload, j.deliveries)" in script
    assert lines[-2] == "\\gset"  # pgbench keeps the one aggregated row (ids, payloads)
    assert lines[-1] == 'DELETE FROM "jobs" WHERE id = ANY(:ids);'
    with pytest.raises(ValueError):
        pgbench_claim_script("SELECT 1", '"jobs"')


def _row(start_ms: int, length_ms: int, confirmed: int) -> CountsRow:
    counts = dict.fromkeys(COUNT_FIELDS, 0)
    counts["confirmed"] = confirmed
    return CountsRow(start_ms, length_ms, start_ms + length_ms, counts, 0)


def test_only_whole_intervals_inside_the_window_count() -> None:
    rows = [
        _row(1_000, 400, 40),  # the start-up interval: begins before the window
        _row(1_400, 600, 600),  # partial at the start, but inside
        _row(2_000, 1000, 1000),
        _row(3_000, 1000, 900),
        _row(4_000, 1000, 50),  # ends after the window: left out
    ]
    assert window_count(rows, "confirmed", 1_400, 4_500) == (2500, 2.6)
    assert window_count(rows, "confirmed", 2_000, 4_000) == (1900, 2.0)
    assert window_count(rows, "confirmed", 4_100, 9_000) == (0, 0.0)


def test_rates_cores_and_both_ratios() -> None:
    mq = Measured("mqlab", 20_000, 2.0, 1.0)  # 10,000/s on one core
    native = Measured("tool", 80_000, 4.0, 0.5)  # 20,000/s using 1/8 of a core
    assert (mq.rate, mq.cores, mq.per_cpu_s) == (10_000, 0.5, 20_000)
    assert (native.rate, native.cores, native.per_cpu_s) == (20_000, 0.125, 160_000)
    c = Comparison("redis", "send", "redis-async", mq, native)
    assert c.ratio == pytest.approx(0.5)
    assert c.ratio_per_core == pytest.approx(0.125)
    table = format_table([c])
    assert "10,000" in table and "160,000" in table and "0.50" in table and "0.12" in table


def test_a_client_that_used_no_measurable_cpu_does_not_divide_by_zero() -> None:
    idle = Measured("tool", 100, 1.0, 0.0)
    assert idle.per_cpu_s == float("inf")
    c = Comparison("redis", "send", "p", Measured("mqlab", 100, 1.0, 0.1), idle)
    assert c.ratio_per_core == 0.0


def test_py_spy_stacks_are_summed_per_frame() -> None:
    raw = [
        "thread (0x1);run (threads.py:89);send (redis.py:148);pack (conn.py:139) 6",
        "thread (0x1);run (threads.py:89);encode (envelope.py:66) 3",
        "thread (0x2);run (threads.py:89);send (redis.py:148) 1",
        "",
        "garbage line",
    ]
    total, own, incl = summarize_stacks(raw)
    assert total == 10
    assert own["pack (conn.py:139)"] == 6 and own["send (redis.py:148)"] == 1
    assert incl["run (threads.py:89)"] == 10 and incl["send (redis.py:148)"] == 7
    assert not any(k.startswith("thread ") for k in incl)


def test_the_goal_is_judged_per_core_on_each_path() -> None:
    def pair(path: str, mq_cpu: float) -> Comparison:
        return Comparison(
            "postgres", path, "p", Measured("m", 900, 1.0, mq_cpu), Measured("n", 1000, 1.0, 0.1)
        )

    line = goal_line([pair("send", 0.1), pair("receive", 5.0)])
    assert line == (
        "goal: ratio >= 0.8 per core; send: postgres 0.90 per core (0.90 wall clock): met; "
        "receive: postgres 0.02 per core (0.90 wall clock): NOT met"
    )
    missed = goal_line([pair("send", 1.0)])
    assert (
        missed
        == "goal: ratio >= 0.8 per core; send: postgres 0.09 per core (0.90 wall clock): NOT met"
    )
    assert goal_line([pair("receive", 0.1)]).endswith(
        "receive: postgres 0.90 per core (0.90 wall clock): met"
    )
    assert goal_line([]) == "goal: nothing measured"


def test_the_native_payload_has_no_nul_byte_and_keeps_its_size() -> None:
    data = bytes(range(256)) * 4
    out = nul_free(data)
    assert len(out) == 1024 and b"\0" not in out
    assert [i for i, (a, b) in enumerate(zip(data, out, strict=True)) if a != b] == [
        0,
        256,
        512,
        768,
    ]


def test_a_native_run_that_stored_other_sizes_is_refused() -> None:
    check_stored("redis-benchmark", [1024] * 20, 1024)
    with pytest.raises(BenchError, match=r"stored messages of \[255, 411\] bytes, not 1024"):
        check_stored("redis-benchmark", [1024, 411, 255, 411], 1024)
    with pytest.raises(BenchError, match="no message stored"):
        check_stored("pgbench", [], 1024)


# Kafka's tools (4.4.0): ProducerPerformance's interval report, ConsumerPerformance's
# detailed stats (the cumulative message count is a column named in its header)
PRODUCER_LINE = (
    "51234 records sent, 10246.8 records/sec (10.01 MB/sec), 12.3 ms avg latency, "
    "180.0 ms max latency."
)
CONSUMER_OUT = [
    "time, threadId, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, nMsg.sec, "
    "rebalance.time.ms, fetch.time.ms, fetch.MB.sec, fetch.nMsg.sec",
    "2026-11-26 17:00:01:000, 0, 1.0, 1.0, 1000, 1000.0, 300, 700, 1.4, 1428.6",
    "2026-11-26 17:00:02:000, 0, 3.5, 2.5, 3500, 2500.0, 0, 1000, 2.5, 2500.0",
    "2026-11-26 17:00:03:000, 0, 7.0, 3.5, 7000, 3500.0, 0, 1000, 3.5, 3500.0",
]


def test_producer_performance_reports_its_interval_count() -> None:
    m = PRODUCED.match(PRODUCER_LINE)
    assert m is not None and int(m.group(1)) == 51234
    assert (
        PRODUCED.match("100000 records sent, 9876.5 records/sec (9.65 MB/sec), 3 ms avg")
        is not None
    )
    assert PRODUCED.match("[2026-11-26] WARN something records sent") is None


def test_consumer_performance_counts_the_increments_after_its_first_report() -> None:
    count = consumed_counter()
    # the header names the column; the first report is the window's start (nothing counted)
    assert [count(line) for line in CONSUMER_OUT] == [None, 0, 2500, 3500]
    assert count("WARN not a report") is None


def test_a_reporting_tool_counts_only_the_reports_after_its_first() -> None:
    # a stand-in tool: a report line every 50 ms, each of 100 messages, after a start line
    script = (
        "import time, sys\n"
        "print('starting', flush=True)\n"
        "while True:\n"
        "    print('100 records sent, 2000.0 records/sec', flush=True)\n"
        "    time.sleep(0.05)\n"
    )

    def produced(line: str) -> int | None:
        m = PRODUCED.match(line)
        return int(m.group(1)) if m else None

    got = windowed_tool([sys.executable, "-c", script], 0.3, produced, "stand-in")
    assert got.messages > 0 and got.messages % 100 == 0
    assert got.seconds >= 0.3 and got.label == "stand-in"
    with pytest.raises(BenchError, match="no report"):
        windowed_tool([sys.executable, "-c", "print('nothing')"], 0.3, produced, "silent")


# ``artemis perf producer`` / ``consumer`` lines of one second (Artemis 2.40.0's format, as
# its user manual's "Performance Tools" chapter prints them)
ARTEMIS_OUT = [
    "Connection brokerURL = tcp://127.0.0.1:61616?confirmationWindowSize=1048576",
    "--- warmup false",
    "--- sent:          7316 msg/sec",
    "--- blocked:       6632 msg/sec",
    "--- completed:     7320 msg/sec",
    "--- received:      7317 msg/sec",
    "--- send ack time:   mean:    113.01 us - 50.00%:    106.00 us - max:      3455.00 us",
    "--- total completed:       70194",
]


def test_artemis_perf_counts_the_confirmed_or_received_of_each_second() -> None:
    completed, received = artemis_perf_counter("completed"), artemis_perf_counter("received")
    assert [completed(line) for line in ARTEMIS_OUT] == [None, None, None, None, 7320] + [None] * 3
    assert [received(line) for line in ARTEMIS_OUT] == [None] * 5 + [7317, None, None]
    # sent (not yet confirmed) and the summary's totals are never counted
    assert completed("--- sent:  900 msg/sec") is None
    assert completed("--- total completed:       70194") is None


ROCKETMQ_OUT = [
    "topic: bench-native-1, threadCount: 8, messageSize: 1024, batchSize: 10, keyEnable: false",
    "Current Time: 1795746387 | Send TPS: 412 | Send MPS: 4120 | Max RT(ms): 31 | Average RT(ms):"
    "  19.380 | Average Message RT(ms):   1.938 | Send Failed: 0 | Send Message Failed: 0",
    "Current Time: 1795746388 | Consume TPS: 3987 | AVG(B2C) RT(ms):   2.000 | AVG(S2C) RT(ms):"
    "   3.000 | MAX(B2C) RT(ms): 9 | MAX(S2C) RT(ms): 12 | Consume Fail: 0",
]


def test_rocketmq_benchmark_counts_messages_not_batches() -> None:
    sent, consumed = rocketmq_counter("Send MPS"), rocketmq_counter("Consume TPS")
    # the producer's TPS is batches a second, its MPS messages: messages are counted
    assert [sent(line) for line in ROCKETMQ_OUT] == [None, 4120, None]
    assert [consumed(line) for line in ROCKETMQ_OUT] == [None, None, 3987]


# PerformanceProducer's report (pulsar-testclient 4.0.8: every 10 s, the cumulative count first)
PULSAR_OUT = [
    "2026-11-28T04:18:02,101 - INFO  - [main:PerformanceProducer@...] - Created 8 producers",
    "2026-11-28T04:18:12,106 - INFO  - [main:PerformanceProducer@...] - Throughput produced:"
    "   58234 msg ---   5823.1 msg/s ---     45.5 Mbit/s  --- failure      0.0 msg/s --- "
    "Latency: mean:  13.6 ms - med:  12.1 - 95pct:  25.3 - 99pct:  40.2 - 99.9pct:  80.1 - "
    "99.99pct:  91.0 - Max:  95.3",
    "2026-11-28T04:18:22,107 - INFO  - [main:PerformanceProducer@...] - Throughput produced:"
    "  119,870 msg ---   6163.6 msg/s ---     48.2 Mbit/s  --- failure      0.0 msg/s --- ...",
]


def test_pulsar_perf_counts_the_messages_since_its_last_report() -> None:
    state: dict[str, int] = {}
    got = [pulsar_produced(line, state) for line in PULSAR_OUT]
    assert got == [None, 0, 119_870 - 58_234]  # the first report only starts the count
    assert pulsar_produced("Aggregated throughput stats --- 7 records sent", state) is None


def test_a_consumers_window_counts_what_its_backlog_lost_from_its_first_drop() -> None:
    """A stand-in consumer (it only sleeps) and a backlog that stays at 1000 until the tool
    has run 0.3 s, then loses 100 each time it is read: the window starts at the first
    drop (and a warm-up after it), its count is what the backlog lost inside it."""
    import time as _time

    tool = [sys.executable, "-c", "import time; time.sleep(30)"]
    for warmup_s in (0.0, 0.4):
        start = _time.monotonic()
        reads: list[tuple[float, int]] = []

        def backlog(start: float = start, reads: list[tuple[float, int]] = reads) -> int:
            now = _time.monotonic()
            left = 1000 if now - start < 0.3 else max(0, 900 - 100 * len(reads))
            if left < 1000:
                reads.append((now, left))
            return left

        got, left = backlog_window(tool, 0.2, backlog, "stand-in", warmup_s=warmup_s)
        # read at the first drop, at the window's start and at its end
        assert [b for _, b in reads] == [900, 800, 700]
        assert got.messages == 100 and left == 700
        assert reads[1][0] - reads[0][0] >= warmup_s
        assert got.seconds >= 0.2 and got.label == "stand-in"
    with pytest.raises(BenchError, match="consumed nothing"):
        backlog_window([sys.executable, "-c", "print('bye')"], 0.2, lambda: 5, "idle")


def test_a_rolling_rate_is_taken_once_over_its_span_with_the_cpu_of_that_span() -> None:
    # RocketMQ's tools print, each second, the rate over their last 9 s: a consumer that
    # drained a backlog of 40,000 in its first second, then took 100 a second
    reports = [(10.0 + k, 2.0 + 0.05 * k, 4_500 if k < 9 else 100) for k in range(12)]
    messages, seconds, cpu_s = rolling_window(reports, 9.0)
    # the last report only: 100 a second over the 9 s before it, never the sum of the
    # reports (their drained backlog counted up to nine times)
    assert (messages, seconds) == (900, 9.0)
    # the CPU between the last report and the one 9 s before it (t = 12 and t = 21)
    assert cpu_s == pytest.approx(9 * 0.05)


def test_a_rolling_window_scales_the_cpu_to_its_span_when_reports_drift() -> None:
    reports = [(0.0, 0.0, 10), (9.5, 1.9, 10)]
    messages, seconds, cpu_s = rolling_window(reports, 9.0)
    assert (messages, seconds) == (90, 9.0)
    assert cpu_s == pytest.approx(1.8)


def test_a_rolling_tool_is_measured_over_its_last_span() -> None:
    # a stand-in tool printing a rolling rate every 50 ms
    script = (
        "import time\n"
        "while True:\n"
        "    print('Current Time: x | Consume TPS: 1000 | AVG(B2C) RT(ms): 1', flush=True)\n"
        "    time.sleep(0.05)\n"
    )
    got = windowed_tool(
        [sys.executable, "-c", script],
        0.1,
        rocketmq_counter("Consume TPS"),
        "stand-in",
        rolling_s=0.3,
    )
    assert got.seconds == 0.3 and got.messages == 300
    # its first reports of 0 (a consumer not yet consuming) are left out of its window
    late = script.replace(
        "while True:",
        "for _ in range(5):\n    print('| Consume TPS: 0 |', flush=True)\nwhile True:",
    )
    got = windowed_tool(
        [sys.executable, "-c", late],
        0.1,
        rocketmq_counter("Consume TPS"),
        "late",
        rolling_s=0.3,
    )
    assert got.messages == 300
    with pytest.raises(BenchError, match="no rate above 0"):
        windowed_tool(
            [sys.executable, "-c", "print('nothing')"],
            0.1,
            rocketmq_counter("Consume TPS"),
            "silent",
            rolling_s=0.3,
        )
