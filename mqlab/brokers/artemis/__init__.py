"""artemis: this folder's descriptor (``mqlab.brokers.descriptor``; stdlib only)."""

from mqlab.brokers.descriptor import Attach, Broker, Contract

BROKER = Broker(
    name="artemis",
    title="ActiveMQ Artemis",
    self_hosted=True,
    local_note=(
        "ActiveMQ Artemis 2.40.0 (Maven Central): a replicated primary, its backup and a "
        "spare, ZooKeeper 3.9 (3 nodes) as lock manager, over STOMP; two copies of each "
        "message (primary + one backup), not three"
    ),
    driver_module="artemis",
    local_cluster="artemis",
    ports={"core": 61616, "console": 8161},
    # STOMP on the one acceptor (``core``) of the live server; the backups run their web
    # console (bound to the host's loopback by ``artemis create``) while they wait
    attach=Attach("core", serving="any", running=("core", "console")),
    mqperf="ActiveMQ Artemis",
    # no visibility timeout, a closed connection returns what it held; remaining() is the
    # management address's messageCount (unacked included) and deliveringCount (the
    # consumer window's read-ahead included)
    contract=(
        # what a closed subscription held comes again with delivery count 1: Artemis does
        # not count a STOMP delivery that was never acked, so no ``redelivered`` header
        Contract(
            "artemis",
            {"receipt_timeout_s": 10.0},
            visibility_s=None,
            prefetches=True,
            reports_redelivery=False,
        ),
    ),
)
