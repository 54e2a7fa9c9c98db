"""artemis: this folder's descriptor (``mqlab.brokers.descriptor``; stdlib only)."""

from mqlab.brokers.descriptor import Attach, Broker, Contract

BROKER = Broker(
    name="artemis",
    title="ActiveMQ Artemis",
    self_hosted=True,
    local_note=(
        "stand-in only: 3 ActiveMQ 5 brokers (Debian activemq), shared-store master/slave "
        "on one KahaDB directory, over STOMP"
    ),
    driver_module="artemis",
    local_cluster="artemis",
    ports={"core": 61616, "console": 8161},
    # STOMP on the one acceptor (``core``) of the live server; the backups run their web
    # console (bound to the host's loopback by ``artemis create``) while they wait
    attach=Attach("core", serving="any", running=("core", "console")),
    mqperf="ActiveMQ Artemis",
    # ActiveMQ 5, the Artemis stand-in (3 brokers, shared-store master/slave): no visibility
    # timeout, a closed connection returns what it held; remaining() is the statistics
    # plugin's queue size (unacked included) and its in-flight count (prefetch included)
    contract=(
        Contract("artemis", {"receipt_timeout_s": 10.0}, visibility_s=None, prefetches=True),
    ),
)
