"""rocketmq: this folder's descriptor (``mqlab.brokers.descriptor``; stdlib only)."""

from mqlab.brokers.descriptor import Attach, Broker

BROKER = Broker(
    name="rocketmq",
    title="Apache RocketMQ",
    self_hosted=True,
    local_note="no local server (none in any reachable registry): the cloud path only",
    driver_module="rocketmq",
    local_cluster=None,
    ports={
        "namesrv": 9876,
        "broker": 10911,
        "broker_vip": 10909,
        "dledger": 40911,
        "proxy": 8081,
        "proxy_remoting": 8080,
    },
    # the gRPC proxy inside every broker; routes name the proxies' advertised addresses
    attach=Attach(
        "proxy",
        running=("proxy", "namesrv"),
        follows_advertised=True,
        node_ports=("broker", "namesrv"),
    ),
    mqperf="RocketMQ",
)
