"""mongodb: this folder's descriptor (``mqlab.brokers.descriptor``; stdlib only)."""

from mqlab.brokers.descriptor import Attach, Broker, Contract

BROKER = Broker(
    name="mongodb",
    title="MongoDB as a queue",
    self_hosted=True,
    local_note=(
        "wire-protocol stand-in only: mongoeco (single process, in memory; Python >= 3.13)"
    ),
    driver_module="mongodb",
    local_cluster="mongodb",
    ports={"mongo": 27017},
    # a replica set: the client finds the primary among the members' own addresses
    attach=Attach("mongo", follows_advertised=True, extra=("replica_set",)),
    mqperf="MongoDB",
    # mongoeco: one process, in memory (majority and journaled are accepted, not performed)
    contract=(
        Contract(
            "mongodb",
            {"visibility_timeout_s": 2.0, "poll_interval_s": 0.05, "op_timeout_s": 10.0},
            visibility_s=2.0,
            nodes=1,
        ),
    ),
)
