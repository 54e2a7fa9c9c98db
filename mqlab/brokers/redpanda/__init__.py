"""redpanda: this folder's descriptor (``mqlab.brokers.descriptor``; stdlib only)."""

from mqlab.brokers.descriptor import Attach, Broker, Contract

# Redpanda speaks Kafka's protocol: Kafka's driver drives it; locally tansu (this folder's
# cluster.py, a stand-in marked as such) serves instead of it; its image runs Redpanda itself
BROKER = Broker(
    name="redpanda",
    title="Redpanda",
    self_hosted=True,
    local_note="protocol stand-in only: tansu (single node, memory storage)",
    driver_module="kafka",
    local_cluster="redpanda",
    ports={"kafka": 9092, "rpc": 33145, "admin": 9644},
    attach=Attach("kafka", ready=("admin", "/v1/status/ready"), follows_advertised=True),
    mqperf="RedPanda",
    # tansu: one node (replicas lowered); uncommitted offsets return after a rebalance.
    # Redeliveries are flagged from the delivered marks in the commit metadata, which
    # tansu drops: a new receiver cannot know (tests/brokers/kafka checks them on Kafka)
    contract=(
        Contract(
            "redpanda-standin",
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
