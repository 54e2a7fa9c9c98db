"""The summary's tables: their names, their columns and their fixed pyarrow schemas (so
every run's Parquet concatenates into the catalog), and the figure names the report and
the site read from them (docs/archive-format.md defines the figures)."""

from __future__ import annotations

import pyarrow as pa

from mqlab.analysis.figures import FIGURES
from mqlab.analysis.partials import TIMELINE_FIGURES, TIMELINE_METRICS
from mqlab.archive.formats import FORMAT_VERSION
from mqlab.archive.layout import METRICS

THROUGHPUT = ("send_msgs_per_s", "receive_msgs_per_s", "send_mb_per_s", "receive_mb_per_s")
DELIVERY = (
    "sent",
    "confirmed",
    "failed",
    "unsent",
    "received",
    "first_received",
    "unique_received",
    "lost",
    "undrained",
    "duplicated",
    "reordered",
    "redelivered",
    "foreign",
    "recovered",
    "unexpected",
)
# Jepsen's total-queue figures, each also as a fraction of the attempts (messages sent)
CHECKER = ("lost", "unexpected", "duplicated", "recovered")
SENT_FIELDS = ("sent", "confirmed", "failed", "unsent")
RECEIVED_FIELDS = ("received", "first_received", "redelivered", "reordered")
OUT_OF_RANGE = ("below_zero", "above_max")
TABLES = ("runs", "windows", "timeline", "latency", "delivery", "problems", "faults")
ROLES = (("sender", "send"), ("receiver", "receive"))


def _fig_type(fig: str) -> pa.DataType:
    return pa.float64() if fig == "mean" else pa.int64()


_LAT_FIELDS = [pa.field(f"{m}_{f}", _fig_type(f)) for m in METRICS for f in FIGURES]
_TP_FIELDS = [pa.field(n, pa.float64()) for n in THROUGHPUT]
_PERIOD_FIELDS = [
    pa.field(f"{name}_{x}", t)
    for _, name in ROLES
    for x, t in (("start_ms", pa.int64()), ("end_ms", pa.int64()), ("period_s", pa.float64()))
]
_META_FIELDS = [
    pa.field("run_id", pa.string()),
    pa.field("run_dir", pa.string()),
    pa.field("scenario", pa.string()),
    pa.field("broker", pa.string()),
    pa.field("profile", pa.string()),
    pa.field("sender_threads", pa.int64()),
    pa.field("receiver_threads", pa.int64()),
    pa.field("sender_nodes", pa.int64()),
    pa.field("receiver_nodes", pa.int64()),
    pa.field("sender_processes", pa.int64()),  # per node; threads are per process
    pa.field("receiver_processes", pa.int64()),
    pa.field("senders", pa.int64()),  # every sender thread of the run
    pa.field("queues", pa.int64()),  # workload.queues; null (read as 1) in older summaries
    pa.field("message_bytes", pa.int64()),
    pa.field("batch", pa.int64()),
    pa.field("status", pa.string()),
    pa.field("end_reason", pa.string()),
    pa.field("started_at", pa.string()),
    pa.field("ended_at", pa.string()),
    pa.field("measure_start_ms", pa.int64()),
    pa.field("warmup_end_ms", pa.int64()),
    pa.field("measure_end_ms", pa.int64()),
    pa.field("mqlab_version", pa.string()),
    pa.field("git_commit", pa.string()),
    pa.field("cluster_target", pa.string()),
    pa.field("host_cpu_model", pa.string()),
    pa.field("sweep", pa.string()),
]
_CONTEXT_FIELDS = [
    pa.field("clock_method", pa.string()),
    pa.field("clock_bound_ms", pa.float64()),
    pa.field("clock_budget_ms", pa.float64()),
    pa.field("clock_within_budget", pa.bool_()),
    pa.field("clock_hosts", pa.string()),  # JSON: host -> {offset_ms, bound_ms, drift_ms}
    pa.field("lab_kind", pa.string()),
    pa.field("lab_name", pa.string()),
    pa.field("price_per_hour_usd", pa.float64()),
    pa.field("run_hours", pa.float64()),
    pa.field("cost_usd", pa.float64()),
    pa.field("cost_per_million_delivered_usd", pa.float64()),
    pa.field("context_unknown", pa.string()),  # JSON: {context figure: why it is null}
]
CONTEXT = tuple(f.name for f in _CONTEXT_FIELDS)
_META = {b"format_version": str(FORMAT_VERSION).encode()}
SCHEMAS: dict[str, pa.Schema] = {
    "runs": pa.schema(
        [
            pa.field("format_version", pa.int64()),
            *_META_FIELDS,
            pa.field("window_s", pa.float64()),
            *_TP_FIELDS,
            *_PERIOD_FIELDS,
            pa.field("sender_lag_ms_max", pa.int64()),
            # what served instead of the real system ("" for the real one): marked
            pa.field("stand_in", pa.string()),
            # workload.order ("any" | "strict") and, under "strict", the messages received
            # out of order (delivery_reordered; null under "any" or when unknown)
            pa.field("order_requirement", pa.string()),
            pa.field("order_violations", pa.int64()),
            # JSON list: the requirements the run failed, one line each (status "failed")
            pa.field("failures", pa.string()),
            # was the load generator the bottleneck (mqlab.analysis.saturation)
            pa.field("client_bound", pa.bool_()),
            pa.field("receivers_behind", pa.bool_()),
            pa.field("client_cpu_max", pa.float64()),  # the busiest client node's cores
            # closed loop: batches in flight by Little's law (saturation section)
            pa.field("effective_concurrency", pa.float64()),
            pa.field("broker_cpu_max", pa.float64()),
            pa.field("shared_cores", pa.bool_()),
            pa.field("saturation", pa.string()),  # JSON: summary.json's saturation section
            pa.field("longest_gap_send_s", pa.int64()),
            pa.field("longest_gap_receive_s", pa.int64()),
            *_LAT_FIELDS,
            *[pa.field(f"{m}_{o}", pa.int64()) for m in METRICS for o in OUT_OF_RANGE],
            *[pa.field(f"delivery_{d}", pa.int64()) for d in DELIVERY],
            *_CONTEXT_FIELDS,
            pa.field("unknown", pa.string()),  # JSON: {figure: why it is null}
            pa.field("bad_lines", pa.int64()),
            pa.field("missing_files", pa.int64()),
            pa.field("summarized_at", pa.string()),
        ],
        metadata=_META,
    ),
    "windows": pa.schema(
        [
            pa.field("run_id", pa.string()),
            pa.field("window_index", pa.int64()),
            pa.field("window_start_ms", pa.int64()),
            pa.field("window_end_ms", pa.int64()),
            *_TP_FIELDS,
            pa.field("sender_lag_ms_max", pa.int64()),
            *_LAT_FIELDS,
        ],
        metadata=_META,
    ),
    "timeline": pa.schema(
        [
            pa.field("run_id", pa.string()),
            pa.field("second_ms", pa.int64()),
            pa.field("confirmed", pa.int64()),
            pa.field("received", pa.int64()),
            pa.field("failed", pa.int64()),
            pa.field("unsent", pa.int64()),
            pa.field("backlog", pa.int64()),
            pa.field("sender_lag_ms", pa.int64()),
            # deliveries of a message the receiver node had had before (received minus
            # first copies minus foreign messages)
            pa.field("repeats", pa.int64()),
            *[pa.field(f"{m}_{f}", pa.int64()) for m in TIMELINE_METRICS for f in TIMELINE_FIGURES],
        ],
        metadata=_META,
    ),
    "latency": pa.schema(
        [
            pa.field("run_id", pa.string()),
            pa.field("metric", pa.string()),
            pa.field("window_index", pa.int64()),
            pa.field("window_start_ms", pa.int64()),
            *[pa.field(f, _fig_type(f)) for f in FIGURES],
            pa.field("histogram", pa.string()),
        ],
        metadata=_META,
    ),
    "delivery": pa.schema(
        [
            pa.field("run_id", pa.string()),
            pa.field("sender_id", pa.int64()),
            *[pa.field(d, pa.int64()) for d in DELIVERY if d != "foreign"],
        ],
        metadata=_META,
    ),
    "problems": pa.schema(
        [
            pa.field("run_id", pa.string()),
            pa.field("file", pa.string()),
            pa.field("line", pa.int64()),
            pa.field("problem", pa.string()),
        ],
        metadata=_META,
    ),
    # one row per fault of the run (mqlab.analysis.faults)
    "faults": pa.schema(
        [
            pa.field("run_id", pa.string()),
            pa.field("fault_index", pa.int64()),
            pa.field("action", pa.string()),
            pa.field("kind", pa.string()),  # a partition's kind, else ""
            pa.field("node", pa.int64()),
            pa.field("label", pa.string()),
            pa.field("start_ms", pa.int64()),
            pa.field("end_ms", pa.int64()),
            pa.field("unavailable_send_s", pa.int64()),
            pa.field("unavailable_receive_s", pa.int64()),
            pa.field("send_p99_recovered_s", pa.int64()),
            pa.field("processing_p99_recovered_s", pa.int64()),
            pa.field("failed", pa.int64()),
            pa.field("repeats", pa.int64()),
            # messages handed to send() in the fault's seconds, and what became of them
            pa.field("sent", pa.int64()),
            pa.field("lost", pa.int64()),
            pa.field("recovered", pa.int64()),
            pa.field("duplicated", pa.int64()),  # of them delivered more than once
        ],
        metadata=_META,
    ),
}
