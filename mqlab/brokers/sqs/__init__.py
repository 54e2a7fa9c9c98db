"""sqs: this folder's descriptor (``mqlab.brokers.descriptor``; stdlib only)."""

from mqlab.brokers.descriptor import Broker, Contract

BROKER = Broker(
    name="sqs",
    title="Amazon SQS",
    self_hosted=False,
    local_note="moto server (SQS API emulator): semantics only, far too slow for numbers",
    driver_module="sqs",
    local_cluster="sqs",
    mqperf="SQS",
    # SQS's message counts are approximate (moto's happen to be exact)
    contract=(
        Contract(
            "sqs", {"visibility_timeout_s": 2}, visibility_s=2.0, nodes=1, remaining_exact=False
        ),
    ),
)
