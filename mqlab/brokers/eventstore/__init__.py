"""eventstore: this folder's descriptor (``mqlab.brokers.descriptor``; stdlib only)."""

from mqlab.brokers.descriptor import Attach, Broker

BROKER = Broker(
    name="eventstore",
    title="EventStoreDB / KurrentDB",
    self_hosted=True,
    local_note=(
        "no local server (none obtainable here): the cloud path only (profile eventstore-r3)"
    ),
    driver_module="eventstore",
    local_cluster=None,
    ports={"node": 2113, "replication": 1112},
    # gossip names the members by the addresses they advertise; the image runs Insecure
    attach=Attach("node", ready=("node", "/health/live"), follows_advertised=True),
    mqperf="Event Store",
    mqperf_note="Event Store 2021 vs today's EventStoreDB/KurrentDB",
)
