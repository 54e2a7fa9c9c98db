"""Redpanda: ``redpanda.yaml`` (node identity, listeners, seeds) and
``.bootstrap.yaml`` (cluster properties: the settings, applied on first start).

Ports: ``kafka``, ``rpc``. ``data_dir`` is ``data_directory``.
"""

from __future__ import annotations

from mqlab.brokers.nodeconf import Node, lines, yaml


def render(node: Node) -> dict[str, str]:
    me, rpc, kafka = node.address, node.port("rpc"), node.port("kafka")
    seeds = "".join(
        f"    - host: {{address: {node.addresses[i]}, port: {node.port('rpc', i)}}}\n"
        for i in range(node.nodes)
    )
    return {
        "redpanda.yaml": (
            "redpanda:\n"
            f"  data_directory: {node.data_dir}\n"
            f"  node_id: {node.index}\n"
            f"  rpc_server: {{address: {me}, port: {rpc}}}\n"
            f"  advertised_rpc_api: {{address: {me}, port: {rpc}}}\n"
            f"  kafka_api:\n    - {{address: {me}, port: {kafka}}}\n"
            f"  advertised_kafka_api:\n    - {{address: {me}, port: {kafka}}}\n"
            f"  seed_servers:\n{seeds}"
        ),
        ".bootstrap.yaml": lines(yaml(node.config_settings())),
    }
