"""The local ActiveMQ Artemis cluster (2.40.0 from Maven Central, ZooKeeper lock manager):
health proves replication, not open ports. The primary says over its management address
that it is no backup and that its replica is in sync; its topology names the backup; the
backup's own log says it synchronized with the primary; the spare waits; ZooKeeper has one
leader. Two copies of each message, not three."""

from __future__ import annotations

import re

import pytest

from mqlab.brokers import servers
from tests.conftest import SharedLab

pytestmark = pytest.mark.integration


def test_a_primary_replicates_to_one_in_sync_backup_and_a_spare_waits(
    shared_lab: SharedLab,
) -> None:
    cluster = shared_lab.cluster("artemis")
    health = cluster.health()
    assert health["healthy"], health
    roles = [n["role"] for n in health["nodes"]]
    assert sorted(roles) == ["backup", "primary", "spare"], roles
    primary, backup = roles.index("primary"), roles.index("backup")
    repl = cluster.replication(primary)  # type: ignore[attr-defined]
    assert repl["backup"] is False and repl["replica_sync"] is True, repl
    assert repl["version"] == servers.version("artemis"), repl
    # one pair: the primary's and the backup's acceptors, under the primary's node id
    [pair] = [p for p in repl["topology"] if p.get("backup")]
    ports = cluster.ports["cluster"]  # the topology names the cluster acceptors
    assert pair["primary"] == f"127.0.0.1:{ports[primary]}", pair
    assert pair["backup"] == f"127.0.0.1:{ports[backup]}", pair
    assert pair["nodeID"] == repl["node_id"], (pair, repl)
    # the backup itself says it has the primary's journal (AMQ221024: synchronized)
    text = cluster.log(backup).read_text(errors="replace")  # type: ignore[attr-defined]
    assert re.search(r"AMQ221024: Backup server .* is synchronized with", text), text[-2000:]
    assert health["zookeeper"]["leader"] is not None and all(health["zookeeper"]["alive"])


def test_the_endpoints_name_the_real_server(shared_lab: SharedLab) -> None:
    cluster = shared_lab.cluster("artemis")
    ep = cluster.endpoints()
    assert ep.extra["stand_in"] is False
    assert cluster.stand_in is None
    assert f"ActiveMQ Artemis {servers.version('artemis')}" in cluster.server_versions()[0]
    assert len(ep.nodes) == 3
