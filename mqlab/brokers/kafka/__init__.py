"""kafka: this folder's descriptor (``mqlab.brokers.descriptor``; stdlib only)."""

from mqlab.brokers.descriptor import Attach, Broker, Contract

BROKER = Broker(
    name="kafka",
    title="Apache Kafka",
    self_hosted=True,
    local_note="Apache Kafka 4.4.0 from Maven Central: 3 KRaft nodes (broker+controller)",
    driver_module="kafka",
    local_cluster="kafka",
    ports={"kafka": 9092, "controller": 9093},
    # KRaft: every node a broker; metadata sends clients to the advertised listeners
    attach=Attach("kafka", follows_advertised=True),
    mqperf="Kafka",
    # the real 3-node cluster: every topic on 3 replicas, 2 in sync for a write. Uncommitted
    # offsets return after a rebalance. Kafka has no redelivery flag: the driver flags
    # redeliveries from the delivered marks receivers commit as offset metadata, which Kafka
    # keeps (tansu dropped them), so the suite's redelivery checks hold here. Offsets are
    # committed as a contiguous prefix: an ack behind an unacked message removes nothing yet
    contract=(
        Contract(
            "kafka",
            {
                "replicas": 3,
                "min_insync_replicas": 2,
                "partitions": 4,
                "commit_interval_s": 0.0,
                "session_timeout_ms": 6000,
            },
            visibility_s=2.0,
            nodes=3,
            reports_redelivery=True,
            acks_remove_at_once=False,
            prefetches=True,
        ),
    ),
)
