"""pulsar: this folder's descriptor (``mqlab.brokers.descriptor``; stdlib only)."""

from mqlab.brokers.descriptor import Attach, Broker, Contract

BROKER = Broker(
    name="pulsar",
    title="Apache Pulsar",
    self_hosted=True,
    local_note="protocol stand-in only: pulsar-lite (single process, RocksDB, one copy)",
    driver_module="pulsar",
    local_cluster="pulsar",
    ports={
        "broker": 6650,
        "http": 8080,
        "zk": 2181,
        "zk_peer": 2888,
        "zk_election": 3888,
        "bookie": 3181,
    },
    # the binary protocol's lookup names the broker that owns a topic; the admin REST API
    # (``http``) creates topics, sets persistence and reads the backlog
    attach=Attach(
        "broker",
        running=("broker", "http"),
        ready=("http", "/admin/v2/brokers/ready"),
        follows_advertised=True,
        extra=("admin_urls",),
    ),
    mqperf="Pulsar",
    # pulsar-lite: one process, one copy. The ack timeout is client-side, at least 10 s in
    # pulsar-client, counted from receive(); the receiver queue (prefetch) is in flight.
    # remaining(): messages stored minus distinct acks (live counters; in_flight unknown)
    contract=(
        Contract(
            "pulsar",
            {
                "ensemble_size": 1,
                "write_quorum": 1,
                "ack_quorum": 1,
                "ack_timeout_s": 10.0,
                "operation_timeout_s": 5,
            },
            visibility_s=10.0,
            nodes=1,
            prefetches=True,
        ),
    ),
)
