"""kafka: this folder's descriptor (``mqlab.brokers.descriptor``; stdlib only)."""

from mqlab.brokers.descriptor import Attach, Broker, Contract

BROKER = Broker(
    name="kafka",
    title="Apache Kafka",
    self_hosted=True,
    local_note="protocol stand-in only: tansu (single node, memory storage)",
    driver_module="kafka",
    local_cluster="kafka",
    ports={"kafka": 9092, "controller": 9093},
    # KRaft: every node a broker; metadata sends clients to the advertised listeners
    attach=Attach("kafka", follows_advertised=True),
    mqperf="Kafka",
    # tansu: one node (replicas lowered); uncommitted offsets return after a rebalance.
    # Redeliveries are flagged from the delivered marks in the commit metadata, which
    # tansu drops: a new receiver cannot know (test_kafka.py checks what does work)
    contract=(
        Contract(
            "kafka",
            {
                "replicas": 1,
                "min_insync_replicas": 1,
                "partitions": 4,
                "commit_interval_s": 0.0,
                "session_timeout_ms": 6000,
            },
            visibility_s=2.0,
            nodes=1,
            reports_redelivery=False,
            acks_remove_at_once=False,
            prefetches=True,
        ),
    ),
)
