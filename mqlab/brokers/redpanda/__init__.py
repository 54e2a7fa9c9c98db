"""redpanda: this folder's descriptor (``mqlab.brokers.descriptor``; stdlib only)."""

from mqlab.brokers.descriptor import Attach, Broker

# Redpanda speaks Kafka's protocol: Kafka's driver drives it and Kafka's local stand-in
# (tansu) stands in for it, so its contract target is Kafka's; this folder holds only its
# node configuration (its image runs Redpanda itself)
BROKER = Broker(
    name="redpanda",
    title="Redpanda",
    self_hosted=True,
    local_note="protocol stand-in only: tansu (single node, memory storage)",
    driver_module="kafka",
    local_cluster="kafka",
    ports={"kafka": 9092, "rpc": 33145, "admin": 9644},
    attach=Attach("kafka", ready=("admin", "/v1/status/ready"), follows_advertised=True),
    mqperf="RedPanda",
)
