"""Pulsar: ZooKeeper, a bookie and a broker on every node.

Files: ``broker.conf``, ``bookkeeper.conf``, ``zookeeper.conf``, ``myid``; node 0 also
``cluster-metadata.args``, the arguments of ``pulsar initialize-cluster-metadata`` (run
once, before the brokers can serve: it registers the cluster and BookKeeper's ledger
layout in ZooKeeper). Ports: ``broker``, ``http``, ``zk``, ``zk_peer``, ``zk_election``,
``bookie``. ``data_dir`` holds ``zookeeper/``, ``journal/`` and ``ledgers/``.
ZooKeeper's own admin server is off: it would take port 8080, the broker's ``http``.
"""

from __future__ import annotations

from mqlab.brokers.nodeconf import LOOPBACK, Node, lines, props


def zookeepers(node: Node) -> str:
    return ",".join(node.endpoint("zk", i) for i in range(node.nodes))


def render(node: Node) -> dict[str, str]:
    zk, me, data = zookeepers(node), node.address, node.data_dir
    broker = node.config_settings() | {
        "metadataStoreUrl": f"zk:{zk}",
        "configurationMetadataStoreUrl": f"zk:{zk}",
        "advertisedAddress": me,
        "brokerServicePort": node.port("broker"),
        "webServicePort": node.port("http"),
        "clusterName": "mqlab",
    }
    bookie = {
        "metadataServiceUri": f"zk://{zk.replace(',', ';')}/ledgers",
        "advertisedAddress": me,
        "bookiePort": node.port("bookie"),
        "journalDirectories": f"{data}/journal",
        "ledgerDirectories": f"{data}/ledgers",
        "journalSyncData": True,
    }
    servers = [
        f"server.{i + 1}={node.addresses[i]}:{node.port('zk_peer', i)}:"
        f"{node.port('zk_election', i)}"
        for i in range(node.nodes)
    ]
    zookeeper = [
        f"dataDir={data}/zookeeper",
        f"clientPort={node.port('zk')}",
        "initLimit=10",
        "syncLimit=5",
        "admin.enableServer=false",
        *servers,
    ]
    files = {
        "broker.conf": lines(props(broker)),
        "bookkeeper.conf": lines(props(bookie)),
        "zookeeper.conf": lines(zookeeper),
        "myid": f"{node.index + 1}\n",
    }
    if node.index == 0:
        files["cluster-metadata.args"] = lines(cluster_metadata_args(node))
    return files


def cluster_metadata_args(node: Node) -> list[str]:
    """``pulsar initialize-cluster-metadata`` arguments, one per line."""
    web = [node.endpoint("http", i) for i in range(node.nodes)]
    service = [node.endpoint("broker", i) for i in range(node.nodes)]
    return metadata_args(zookeepers(node), web, service)


def metadata_args(zk: str, web: list[str], service: list[str]) -> list[str]:
    """The cluster ``mqlab``'s metadata: its store on ZooKeeper ``zk`` (both stores), its
    brokers' web (``host:port``) and binary-protocol addresses."""
    return [
        "--cluster",
        "mqlab",
        "--metadata-store",
        f"zk:{zk}",
        "--configuration-metadata-store",
        f"zk:{zk}",
        "--web-service-url",
        "http://" + ",".join(web),
        "--broker-service-url",
        "pulsar://" + ",".join(service),
    ]


# -- the local cluster (mqlab.brokers.pulsar.cluster): every process on 127.0.0.1 ----------
# One ZooKeeper, three bookies and up to three brokers, each its own process with its
# own ports; the keys below are BookKeeper's and Pulsar's own configuration names.

#: what every ledger of the local cluster asks of the bookies (the brokers' defaults;
#: the driver's namespace persistence policy sets the same per namespace)
LOCAL_REPLICATION = {
    "managedLedgerDefaultEnsembleSize": 3,
    "managedLedgerDefaultWriteQuorum": 3,
    "managedLedgerDefaultAckQuorum": 2,
}


def local_zookeeper(data_dir: str, port: int) -> str:
    """One standalone ZooKeeper (no ``server.N`` lines), on loopback, no admin server."""
    return lines(
        [
            f"dataDir={data_dir}",
            f"clientPort={port}",
            "clientPortAddress=127.0.0.1",
            "tickTime=2000",
            "admin.enableServer=false",
        ]
    )


def local_bookie(data_dir: str, port: int, zk: str) -> str:
    """A bookie on loopback (BookKeeper refuses loopback addresses unless allowed), its
    journal fsynced per entry, small DbLedgerStorage caches (they come out of direct
    memory), writes refused only on a nearly full disk."""
    return lines(
        props(
            {
                "bookiePort": port,
                "advertisedAddress": LOOPBACK,
                "allowLoopback": True,
                "metadataServiceUri": f"zk://{zk}/ledgers",
                "journalDirectories": f"{data_dir}/journal",
                "ledgerDirectories": f"{data_dir}/ledgers",
                "journalSyncData": True,
                "ledgerStorageClass": "org.apache.bookkeeper.bookie.storage.ldb.DbLedgerStorage",
                "dbStorage_writeCacheMaxSizeMb": 32,
                "dbStorage_readAheadCacheMaxSizeMb": 16,
                "dbStorage_rocksDB_blockCacheSize": 16 * 1024 * 1024,
                "diskUsageThreshold": 0.99,
                "diskUsageWarnThreshold": 0.98,
                "httpServerEnabled": False,
            }
        )
    )


def local_broker(broker_port: int, http_port: int, zk: str) -> str:
    """A broker on loopback. ``bookkeeper_delayEnsembleChange`` (passed to its BookKeeper
    client): with exactly three bookies and ensemble 3, a dead bookie cannot be replaced,
    so an entry counts as written once ``ack quorum`` bookies have it instead of failing
    the ledger. A short metadata session: a killed broker's topics move after 10 s.
    Topic-level policies (a system topic per namespace) are off: the driver sets the
    namespace's persistence."""
    return lines(
        props(
            {
                "clusterName": "mqlab",
                "metadataStoreUrl": f"zk:{zk}",
                "configurationMetadataStoreUrl": f"zk:{zk}",
                "bindAddress": LOOPBACK,
                "advertisedAddress": LOOPBACK,
                "brokerServicePort": broker_port,
                "webServicePort": http_port,
                **LOCAL_REPLICATION,
                "bookkeeper_delayEnsembleChange": True,
                "brokerDeleteInactiveTopicsEnabled": False,
                "allowAutoTopicCreation": False,
                "metadataStoreSessionTimeoutMillis": 10000,
                "systemTopicEnabled": False,
                "topicLevelPoliciesEnabled": False,
                "functionsWorkerEnabled": False,
                "webSocketServiceEnabled": False,
                "managedLedgerCacheSizeMB": 64,
            }
        )
    )


def local_cluster_metadata_args(zk: str, http: list[int], broker: list[int]) -> list[str]:
    """``PulsarClusterMetadataSetup`` arguments for the local cluster."""
    return metadata_args(zk, [f"{LOOPBACK}:{p}" for p in http], [f"{LOOPBACK}:{p}" for p in broker])
