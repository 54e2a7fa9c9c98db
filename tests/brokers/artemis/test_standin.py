"""Pure logic of the ActiveMQ 5 stand-in's launcher (mqlab.brokers.artemis.cluster): each node's
activemq.xml and command line. Starting the real brokers, failover included, is
tests/brokers/artemis/test_standin_cluster.py."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from mqlab.brokers.artemis import cluster as standin
from mqlab.errors import ClusterError
from mqlab.hosts.ssh import SshHost

AMQ = "{http://activemq.apache.org/schema/core}"


def _broker(tmp_path: Path) -> ET.Element:
    text = standin.activemq_xml("mqlab-1", 40123, tmp_path / "n1" / "data", tmp_path / "kahadb")
    broker = ET.fromstring(text).find(f"{AMQ}broker")
    assert broker is not None
    return broker


def test_the_only_connector_is_stomp_on_loopback_without_nagle(tmp_path: Path) -> None:
    broker = _broker(tmp_path)
    uris = [c.get("uri") for c in broker.iter(f"{AMQ}transportConnector")]
    assert uris == ["stomp://127.0.0.1:40123?transport.tcpNoDelay=true"]
    assert broker.get("useJmx") == "false"  # no JMX connector, no RMI port
    assert broker.get("brokerName") == "mqlab-1"
    assert broker.get("dataDirectory") == str(tmp_path / "n1" / "data")


def test_persistent_store_is_the_shared_kahadb_with_a_quick_lock_retry(tmp_path: Path) -> None:
    broker = _broker(tmp_path)
    assert broker.get("persistent") == "true"
    [kahadb] = list(broker.iter(f"{AMQ}kahaDB"))
    assert kahadb.get("directory") == str(tmp_path / "kahadb")
    assert kahadb.get("journalDiskSyncStrategy") == "always"  # an fsync per write
    [locker] = list(broker.iter(f"{AMQ}shared-file-locker"))
    assert locker.get("lockAcquireSleepInterval") == str(standin.LOCK_RETRY_MS)


def test_the_statistics_plugin_is_on(tmp_path: Path) -> None:
    broker = _broker(tmp_path)
    assert len(list(broker.iter(f"{AMQ}statisticsBrokerPlugin"))) == 1


def test_each_node_runs_its_own_config_with_a_small_heap(tmp_path: Path) -> None:
    c = standin.ArtemisCluster(tmp_path / "c")
    assert c.nodes == 3
    cmd = c.command(2)
    d = tmp_path / "c" / "n2"
    assert "-Xmx256m" in cmd
    assert f"-Dactivemq.base={d}" in cmd and f"-Dactivemq.conf={d / 'conf'}" in cmd
    assert cmd[-3:] == [str(standin.ACTIVEMQ_JAR), "start", f"xbean:file:{d / 'activemq.xml'}"]
    assert c.kahadb == tmp_path / "c" / "shared" / "kahadb"  # one store for all nodes


def test_the_stand_in_is_marked_and_runs_locally_only(tmp_path: Path) -> None:
    assert standin.ArtemisCluster.stand_in and "\n" not in standin.ArtemisCluster.stand_in
    assert "ActiveMQ 5" in standin.ArtemisCluster.stand_in
    hosts = [SshHost(f"b{i}", f"10.9.9.{i}", root="/tmp/x") for i in range(3)]
    with pytest.raises(ClusterError, match="this machine only"):
        standin.ArtemisCluster(tmp_path / "c", 3, hosts)
