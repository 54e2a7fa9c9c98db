"""pulsar: this folder's descriptor (``mqlab.brokers.descriptor``; stdlib only)."""

from mqlab.brokers.descriptor import Attach, Broker, Contract

BROKER = Broker(
    name="pulsar",
    title="Apache Pulsar",
    self_hosted=True,
    local_note="Apache Pulsar from Maven Central: 1 ZooKeeper, 3 bookies (ensemble 3, write "
    "quorum 3, ack quorum 2), 3 brokers",
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
    # the real cluster: 3 brokers over 3 bookies. The ack timeout is client-side, at least
    # 10 s in pulsar-client, counted from receive(); the receiver queue (prefetch) is in
    # flight. remaining(): the subscription's backlog and unacked count (topic stats).
    contract=(
        Contract(
            "pulsar",
            {
                "ensemble_size": 3,
                "write_quorum": 3,
                "ack_quorum": 2,
                "ack_timeout_s": 10.0,
                "operation_timeout_s": 10,
            },
            visibility_s=10.0,
            # the broker's redelivery count stays 0 on what a closed or dead consumer held
            # and another then receives (seen on 4.2.4 here): Delivery.redelivered is not
            # reliable on Pulsar
            reports_redelivery=False,
            prefetches=True,
        ),
    ),
)
