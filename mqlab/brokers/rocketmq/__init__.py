"""rocketmq: this folder's descriptor (``mqlab.brokers.descriptor``; stdlib only)."""

from mqlab.brokers.descriptor import Attach, Broker, Contract

BROKER = Broker(
    name="rocketmq",
    title="Apache RocketMQ",
    self_hosted=True,
    local_note=(
        "Apache RocketMQ 5.4.0 from Maven Central: a name server, 3 brokers whose commit "
        "log is one DLedger (Raft) group, and the gRPC proxy in cluster mode"
    ),
    driver_module="rocketmq",
    local_cluster="rocketmq",
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
    # the local proxy accepts invisible durations from 1 s (mqlab/brokers/rocketmq/cluster.py)
    contract=(
        Contract(
            "rocketmq",
            {"invisible_duration_s": 5, "send_timeout_s": 30.0},
            visibility_s=5.0,
            # remaining() counts ready messages, and unacked ones once the broker revived
            # them (a few seconds after their invisible duration): it agrees within seconds
            remaining_exact=False,
            prefetches=True,  # a pop reads up to 32 ahead of what a receive hands out
        ),
        # the official Python client through the gRPC proxy (the driver's client = "grpc")
        Contract(
            "rocketmq-grpc",
            {"client": "grpc", "invisible_duration_s": 5, "send_timeout_s": 30.0},
            visibility_s=5.0,
            remaining_exact=False,
        ),
    ),
)
