"""ActiveMQ Artemis: ``broker.xml`` for a live server and its replicating backups.

Node 0 is the live server (HA policy ``replication``, ``primary``), the other nodes are its
backups (``backup``), all in one group. The live server replicates to one backup at a time,
synchronously: a message counts as stored once that backup has it. A further backup waits
and pairs with the live server that follows a failover. The names are those of the pinned
release (2.40.0, the version mqlab runs locally; releases before 2.31 called them
``master``/``slave``, which 2.40 still reads but marks deprecated). Node 0 checks for an
active server at start (``check-for-active-server``), so when it comes back after a
failover it does not serve a second, stale copy: it fails back instead.

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


#: a local cluster's journal (``node.settings`` is empty there): written with Java NIO (no
#: libaio needed) and synced on every persistent send and every ack (Artemis's defaults,
#: stated), with a small paging threshold to fit the 512 MiB heaps
LOCAL_SETTINGS: dict[str, object] = {
    "journal-type": "NIO",
    "journal-datasync": True,
    "journal-sync-non-transactional": True,
    "journal-sync-transactional": True,
    "global-max-size": "128Mb",
}
#: the lock manager of a local cluster (``lock_manager``): ZooKeeper through Curator, whose
#: jars ship in the distribution's lib/
CURATOR = "org.apache.activemq.artemis.lockmanager.zookeeper.CuratorDistributedLockManager"


def _lock_manager_ha(index: int, connect: str, session_ms: int) -> str:
    """The HA policy with a pluggable lock manager: node 0 the primary, the others backups
    (one replicates, the next one waits as a spare). Whoever holds the ZooKeeper lock of
    the pair's node id serves; a backup takes it only once the primary's session is gone
    and only if its journal is in sync (the activation sequence ZooKeeper keeps)."""
    props = {"connect-string": connect, "session-ms": session_ms, "connection-ms": 2000}
    manager = (
        f"<manager><class-name>{CURATOR}</class-name><properties>"
        + "".join(f'<property key="{k}" value="{v}"/>' for k, v in props.items())
        + "</properties></manager>"
    )
    if index == 0:
        return f"<primary>{manager}</primary>"
    return f"<backup>{manager}<allow-failback>false</allow-failback></backup>"


def render(node: Node, lock_manager: str | None = None, session_ms: int = 6000) -> dict[str, str]:
    """``broker.xml`` of node ``node``. ``lock_manager``: a ZooKeeper connect string; the
    pair then coordinates through it (the local cluster), else through Artemis's quorum
    vote among live servers (the cloud image's ``primary``/``backup``)."""
    i, data = node.index, node.data_dir
    # with a lock manager (local), cluster and replication traffic has an acceptor of its
    # own: a management request that blocks a client acceptor's I/O thread on the journal
    # (destroyQueue) then cannot also hold up the backup's replication acks it waits for
    link = "cluster" if lock_manager is not None and "cluster" in node.ports else "core"
    connectors = "".join(
        f'      <connector name="n{n}">tcp://{node.endpoint(link, n)}</connector>\n'
        for n in range(node.nodes)
    )
    cluster_acceptor = (
        f'      <acceptor name="cluster">tcp://{node.endpoint("cluster", i)}</acceptor>\n'
        if link == "cluster"
        else ""
    )
    others = "".join(
        f"          <connector-ref>n{n}</connector-ref>\n" for n in range(node.nodes) if n != i
    )
    if lock_manager is not None:
        ha = _lock_manager_ha(i, lock_manager, session_ms)
    else:
        role, flag = (
            ("primary", "check-for-active-server") if i == 0 else ("backup", "allow-failback")
        )
        ha = f"<{role}><group-name>mqlab</group-name><{flag}>true</{flag}></{role}>"
    # a spare's registration waits this long for a busy primary (default 30 s)
    call_timeout = "        <call-timeout>60000</call-timeout>\n" if lock_manager else ""
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
            + _elements(node.config_settings() or LOCAL_SETTINGS, "    ")
            + "    <security-enabled>false</security-enabled>\n"
            "    <cluster-user>mqlab</cluster-user>\n"
            f"    <cluster-password>{password}</cluster-password>\n"
            f"    <connectors>\n{connectors}    </connectors>\n"
            "    <acceptors>\n"
            f'      <acceptor name="all">tcp://{node.endpoint("core", i)}</acceptor>\n'
            f"{cluster_acceptor}"
            "    </acceptors>\n"
            f"    <ha-policy><replication>{ha}</replication></ha-policy>\n"
            '    <cluster-connections>\n      <cluster-connection name="mqlab">\n'
            f"        <connector-ref>n{i}</connector-ref>\n"
            f"        <static-connectors>\n{others}        </static-connectors>\n"
            f"{call_timeout}"
            "      </cluster-connection>\n    </cluster-connections>\n"
            f"    <address-settings>\n{address_settings}    </address-settings>\n"
            " </core>\n</configuration>\n"
        )
    }
