"""Every ``broker.xml`` mqlab renders for Artemis (mqlab/brokers/artemis/node.py) is valid
against the schema of the pinned release (``schema/artemis-configuration.xsd`` in the
fetched distribution's artemis-server jar), checked by the JDK's validator: the local
cluster's (a ZooKeeper lock manager) and the cloud image's (quorum vote), on every node.
The image's file is never read by a server here; this is what proves its element names
(``primary``/``backup``, ``check-for-active-server``) are the release's."""

from __future__ import annotations

import subprocess
import xml.etree.ElementTree as ET
import zipfile
from pathlib import Path

import pytest

from mqlab.brokers import nodeconf, servers
from mqlab.brokers.artemis import node as artemis_node

pytestmark = pytest.mark.integration

VALIDATOR = Path(__file__).with_name("ValidateXml.java")
CORE = "{urn:activemq:core}core"
IMAGE_SETTINGS = {"persistence-enabled": True, "journal-type": "MAPPED"}


def _schema(tmp: Path) -> Path:
    v = servers.pin("artemis").version
    jar = servers.home("artemis") / "dist" / f"apache-artemis-{v}" / "lib"
    (server,) = jar.glob(f"artemis-server-{v}.jar")
    with zipfile.ZipFile(server) as z:  # the schema and the xml.xsd it imports
        z.extractall(tmp, [n for n in z.namelist() if n.startswith("schema/")])
    return tmp / "schema" / "artemis-configuration.xsd"


def _node(index: int, settings: dict) -> nodeconf.Node:
    ports = {name: (p,) * 3 for name, p in nodeconf.broker_ports("artemis").items()}
    if not settings:  # the local cluster: a cluster acceptor of its own
        ports["cluster"] = (61617,) * 3
    return nodeconf.Node(
        "artemis", index, ("10.0.1.10", "10.0.1.11", "10.0.1.12"), ports, "/d", "lab-1", settings
    )


def _validate(schema: Path, files: list[Path]) -> subprocess.CompletedProcess[str]:
    java = str(servers.java(servers.pin("artemis").java))
    cmd = [java, str(VALIDATOR), str(schema), *map(str, files)]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)


def _core(xml: str, path: Path) -> Path:
    core = ET.fromstring(xml).find(CORE)
    assert core is not None
    path.write_text(ET.tostring(core, encoding="unicode"))
    return path


def test_every_rendered_broker_xml_is_valid_for_the_pinned_release(tmp_path: Path) -> None:
    schema = _schema(tmp_path)
    files = []
    for i in range(3):
        image = artemis_node.render(_node(i, IMAGE_SETTINGS))["broker.xml"]
        local = artemis_node.render(_node(i, {}), lock_manager="127.0.0.1:2181")["broker.xml"]
        files += [
            _core(image, tmp_path / f"image{i}.xml"),
            _core(local, tmp_path / f"local{i}.xml"),
        ]
    r = _validate(schema, files)
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.count("valid ") == 6 and "invalid" not in r.stdout
    # the validator refuses what the release does not know
    bad = tmp_path / "bad.xml"
    bad.write_text(files[0].read_text().replace("check-for-active-server", "check-for-bogus"))
    r = _validate(schema, [bad])
    assert r.returncode == 1 and "invalid" in r.stdout and "check-for-bogus" in r.stdout
