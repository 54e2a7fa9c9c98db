"""redis: this folder's descriptor (``mqlab.brokers.descriptor``; stdlib only)."""

from mqlab.brokers.descriptor import Broker, Contract

BROKER = Broker(
    name="redis",
    title="Redis Streams",
    self_hosted=True,
    local_note="primary + 2 replicas (Debian redis-server), AOF on",
    driver_module="redis",
    local_cluster="redis",
    ports={"client": 6379, "sentinel": 26379},
    mqperf="Redis Streams",
    contract=(
        Contract(
            "redis",
            {"visibility_timeout_s": 2.0, "reclaim_interval_s": 0.5, "wait_replicas": 1},
            visibility_s=2.0,
            prefetches=True,
        ),
        # acked entries stay in the streams: remaining() must not count them
        Contract(
            "redis-keep",
            {
                "streams": 3,
                "delete_on_ack": False,
                "visibility_timeout_s": 2.0,
                "reclaim_interval_s": 0.5,
            },
            visibility_s=2.0,
            prefetches=True,
        ),
    ),
)
