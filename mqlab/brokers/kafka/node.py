"""Kafka in KRaft mode: every node is broker and controller; node ``i`` has id ``i``.

Files: ``server.properties``, ``cluster-id`` (derived from the lab id, the same on
every node, for ``kafka-storage.sh format``) and ``log4j2.properties`` (the log
configuration the local launcher passes; the Maven artifacts carry none). Ports:
``kafka``, ``controller``. ``data_dir`` is ``log.dirs``.
"""

from __future__ import annotations

from typing import Any

from mqlab.brokers.nodeconf import Node, kafka_cluster_id, lines, props

#: the listener layout every node needs (an image's settings may repeat it)
KRAFT: dict[str, Any] = {
    "process.roles": "broker,controller",
    "controller.listener.names": "CONTROLLER",
    "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
    "inter.broker.listener.name": "PLAINTEXT",
}


def local_settings(nodes: int) -> dict[str, Any]:
    """What local clusters run with (settings={}): every topic and internal topic on
    ``min(3, nodes)`` replicas, 2 of them in sync for a write (1 on a smaller cluster),
    no unclean leader election, no per-message flush (Kafka's default: the OS flushes;
    a profile's ``flush_messages`` sets ``flush.messages`` on its topic), small thread
    pools for a 2-core machine, and no group-join delay."""
    rf = min(3, nodes)
    isr = min(2, rf)
    return {
        "default.replication.factor": rf,
        "min.insync.replicas": isr,
        "unclean.leader.election.enable": False,
        "offsets.topic.replication.factor": rf,
        "offsets.topic.num.partitions": 10,
        "transaction.state.log.replication.factor": rf,
        "transaction.state.log.min.isr": isr,
        "transaction.state.log.num.partitions": 10,
        "share.coordinator.state.topic.replication.factor": rf,
        "share.coordinator.state.topic.min.isr": isr,
        "group.initial.rebalance.delay.ms": 0,
        "auto.create.topics.enable": False,
        "num.network.threads": 2,
        "num.io.threads": 4,
        "num.recovery.threads.per.data.dir": 1,
        "log.segment.bytes": 64 * 1024 * 1024,
    }


#: log4j2 configuration (properties format: log4j-core reads it without extra jars); the
#: launcher sets ``kafka.logs.dir`` to the node's directory
LOG4J2 = lines(
    [
        "# written by mqlab",
        "status = warn",
        "appender.file.type = RollingFile",
        "appender.file.name = file",
        "appender.file.fileName = ${sys:kafka.logs.dir}/server.log",
        "appender.file.filePattern = ${sys:kafka.logs.dir}/server.log.%i",
        "appender.file.layout.type = PatternLayout",
        "appender.file.layout.pattern = [%d] %p %m (%c)%n",
        "appender.file.policies.type = Policies",
        "appender.file.policies.size.type = SizeBasedTriggeringPolicy",
        "appender.file.policies.size.size = 50MB",
        "appender.file.strategy.type = DefaultRolloverStrategy",
        "appender.file.strategy.max = 2",
        "rootLogger.level = info",
        "rootLogger.appenderRef.file.ref = file",
        "logger.state.name = state.change.logger",
        "logger.state.level = warn",
        "logger.request.name = kafka.request.logger",
        "logger.request.level = warn",
    ]
)


def voters(node: Node) -> str:
    """``controller.quorum.voters``: ``id@address:port`` of every node."""
    return ",".join(f"{i}@{node.endpoint('controller', i)}" for i in range(node.nodes))


def render(node: Node) -> dict[str, str]:
    me = node.address
    s = KRAFT | (node.config_settings() or local_settings(node.nodes))
    s |= {
        "node.id": node.index,
        "controller.quorum.voters": voters(node),
        "listeners": f"PLAINTEXT://{me}:{node.port('kafka')},"
        f"CONTROLLER://{me}:{node.port('controller')}",
        "advertised.listeners": f"PLAINTEXT://{me}:{node.port('kafka')}",
        "log.dirs": node.data_dir,
    }
    return {
        "server.properties": lines(props(s)),
        "cluster-id": kafka_cluster_id(node.lab_id) + "\n",
        "log4j2.properties": LOG4J2,
    }
