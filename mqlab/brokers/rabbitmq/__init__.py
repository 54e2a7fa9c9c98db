"""rabbitmq: this folder's descriptor (``mqlab.brokers.descriptor``; stdlib only)."""

from mqlab.brokers.descriptor import Broker, Contract

BROKER = Broker(
    name="rabbitmq",
    title="RabbitMQ quorum queues",
    self_hosted=True,
    local_note="3 RabbitMQ nodes on one host (Debian rabbitmq-server)",
    driver_module="rabbitmq",
    local_cluster="rabbitmq",
    ports={"amqp": 5672, "dist": 25672, "epmd": 4369, "management": 15672},
    mqperf="RabbitMQ",
    # no visibility timeout: RabbitMQ redelivers when the receiver's channel closes;
    # remaining() reports only ready messages (not those held by open channels)
    contract=(
        Contract(
            "rabbitmq",
            visibility_s=None,
            remaining_counts_unacked=False,
            prefetches=True,
        ),
    ),
)
