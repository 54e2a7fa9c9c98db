"""ActiveMQ Artemis: ``broker.xml`` for a live server and its replicating backups.

Node 0 is the live server (HA policy ``replication``, ``master``), the other nodes are its
backups (``slave``), all in one group. The live server replicates to one backup at a time,
synchronously: a message counts as stored once that backup has it. A further backup waits
and pairs with the live server that follows a failover. The names ``master``/``slave`` are
those of the pinned release (2.27.1; 2.31 renamed them ``primary``/``backup``). Node 0
checks for a live server at start (``check-for-live-server``), so when it comes back after
a failover it does not serve a second, stale copy: it fails back instead.

Ports: ``core`` (61616; the one acceptor takes every protocol, STOMP included, which the
driver uses) and ``console`` (8161, the web console of ``artemis create``'s
bootstrap.xml). ``data_dir`` holds ``paging/``, ``bindings/``, ``journal/`` and ``large/``.
The durability settings (``node.settings``) become elements of ``<core>``.

What the driver (``mqlab.brokers.artemis.driver``) relies on is also here. Queues are
auto-created as anycast and are never auto-deleted, not even when empty. Deliveries are
never dead-lettered (``max-delivery-attempts`` -1). The driver's management reply queues
(``mqlab.reply.*``) go away once they are empty. Security is off: the lab's security
groups and firewall keep the ports inside the VPC. The backups join with a cluster user
and a password that every node derives from the lab id.
"""

from __future__ import annotations

from mqlab.brokers.nodeconf import Node, lab_secret


def _value(v: object) -> str:
    return str(v).lower() if isinstance(v, bool) else str(v)


def _elements(settings: dict[str, object], indent: str) -> str:
    return "".join(f"{indent}<{k}>{_value(v)}</{k}>\n" for k, v in sorted(settings.items()))


#: address settings: the driver's queues (``#``), and its management reply queues
ADDRESS_SETTINGS = {
    "mqlab.reply.#": {
        "default-address-routing-type": "ANYCAST",
        "default-queue-routing-type": "ANYCAST",
        "auto-delete-queues": True,
        "auto-delete-addresses": True,
    },
    "#": {
        "default-address-routing-type": "ANYCAST",
        "default-queue-routing-type": "ANYCAST",
        "auto-create-queues": True,
        "auto-create-addresses": True,
        "auto-delete-queues": False,
        "auto-delete-addresses": False,
        "max-delivery-attempts": -1,
        "redelivery-delay": 0,
    },
}


def render(node: Node) -> dict[str, str]:
    i, data = node.index, node.data_dir
    connectors = "".join(
        f'      <connector name="n{n}">tcp://{node.endpoint("core", n)}</connector>\n'
        for n in range(node.nodes)
    )
    others = "".join(
        f"          <connector-ref>n{n}</connector-ref>\n" for n in range(node.nodes) if n != i
    )
    role, flag = ("master", "check-for-live-server") if i == 0 else ("slave", "allow-failback")
    ha = f"<{role}><group-name>mqlab</group-name><{flag}>true</{flag}></{role}>"
    address_settings = "".join(
        f'      <address-setting match="{match}">\n'
        + _elements(dict(settings), "        ")
        + "      </address-setting>\n"
        for match, settings in ADDRESS_SETTINGS.items()
    )
    password = lab_secret(node.lab_id, "artemis-cluster")[:32]
    return {
        "broker.xml": (
            '<configuration xmlns="urn:activemq">\n <core xmlns="urn:activemq:core">\n'
            f"    <name>mqlab-{i}</name>\n"
            f"    <paging-directory>{data}/paging</paging-directory>\n"
            f"    <bindings-directory>{data}/bindings</bindings-directory>\n"
            f"    <journal-directory>{data}/journal</journal-directory>\n"
            f"    <large-messages-directory>{data}/large</large-messages-directory>\n"
            + _elements(node.config_settings(), "    ")
            + "    <security-enabled>false</security-enabled>\n"
            "    <cluster-user>mqlab</cluster-user>\n"
            f"    <cluster-password>{password}</cluster-password>\n"
            f"    <connectors>\n{connectors}    </connectors>\n"
            "    <acceptors>\n"
            f'      <acceptor name="all">tcp://{node.endpoint("core", i)}</acceptor>\n'
            "    </acceptors>\n"
            f"    <ha-policy><replication>{ha}</replication></ha-policy>\n"
            '    <cluster-connections>\n      <cluster-connection name="mqlab">\n'
            f"        <connector-ref>n{i}</connector-ref>\n"
            f"        <static-connectors>\n{others}        </static-connectors>\n"
            "      </cluster-connection>\n    </cluster-connections>\n"
            f"    <address-settings>\n{address_settings}    </address-settings>\n"
            " </core>\n</configuration>\n"
        )
    }
