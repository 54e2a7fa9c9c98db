"""ActiveMQ Artemis: ``broker.xml``; node 0 is the replication primary, the others backups.

Ports: ``core``. ``data_dir`` holds ``paging/``, ``bindings/``, ``journal/``, ``large/``.
Settings become elements of ``<core>``.
"""

from __future__ import annotations

from mqlab.nodeconf import Node


def _value(v: object) -> str:
    return str(v).lower() if isinstance(v, bool) else str(v)


def render(node: Node) -> dict[str, str]:
    i, data = node.index, node.data_dir
    connectors = "".join(
        f'      <connector name="n{n}">tcp://{node.endpoint("core", n)}</connector>\n'
        for n in range(node.nodes)
    )
    statics = "".join(
        f"          <connector-ref>n{n}</connector-ref>\n" for n in range(node.nodes) if n != i
    )
    ha = "primary" if i == 0 else "backup"
    extra = "".join(
        f"    <{k}>{_value(v)}</{k}>\n" for k, v in sorted(node.config_settings().items())
    )
    return {
        "broker.xml": (
            '<configuration xmlns="urn:activemq">\n <core xmlns="urn:activemq:core">\n'
            f"    <name>mqlab-{i}</name>\n"
            f"    <paging-directory>{data}/paging</paging-directory>\n"
            f"    <bindings-directory>{data}/bindings</bindings-directory>\n"
            f"    <journal-directory>{data}/journal</journal-directory>\n"
            f"    <large-messages-directory>{data}/large</large-messages-directory>\n"
            f"{extra}    <connectors>\n{connectors}    </connectors>\n"
            "    <acceptors>\n"
            f'      <acceptor name="all">tcp://{node.endpoint("core", i)}</acceptor>\n'
            "    </acceptors>\n"
            f"    <ha-policy><replication><{ha}><group-name>mqlab</group-name></{ha}>"
            "</replication></ha-policy>\n"
            f'    <cluster-connections>\n      <cluster-connection name="mqlab">\n'
            f"        <connector-ref>n{i}</connector-ref>\n        <static-connectors>\n{statics}"
            "        </static-connectors>\n      </cluster-connection>\n"
            "    </cluster-connections>\n"
            " </core>\n</configuration>\n"
        )
    }
