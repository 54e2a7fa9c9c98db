#!/usr/bin/env python3
"""Boot-time node configuration for mqlab's NixOS images (stdlib only).

mqlab_node.py bootstrap --broker B [--user-data-file F | --imds URL] --out /run/mqlab
    reads EC2 user data (the JSON contract in docs/node-bootstrap.md), validates
    it and writes node.json and node.env (systemd EnvironmentFile).
mqlab_node.py render --node /run/mqlab/node.json --image /etc/mqlab/broker.json --out DIR
    writes the broker's config files for this node: the durability settings
    baked into the image plus node index, own IP and peers' IPs.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import ipaddress
import json
import sys
import urllib.request
import uuid
from pathlib import Path

FORMAT_VERSION = 1
ROLES = ("broker", "sender", "receiver")


class UserDataError(Exception):
    """The user data does not follow docs/node-bootstrap.md."""


def fetch_user_data(imds: str) -> str:
    """IMDSv2: a session token, then the raw user data."""
    req = urllib.request.Request(
        f"{imds}/latest/api/token",
        method="PUT",
        headers={"X-aws-ec2-metadata-token-ttl-seconds": "300"},
    )
    with urllib.request.urlopen(req, timeout=5) as resp:
        token = resp.read().decode()
    req = urllib.request.Request(
        f"{imds}/latest/user-data", headers={"X-aws-ec2-metadata-token": token}
    )
    with urllib.request.urlopen(req, timeout=5) as resp:
        return str(resp.read().decode())


def parse_user_data(text: str, image_broker: str) -> dict:
    try:
        data = json.loads(text)
    except json.JSONDecodeError as err:
        raise UserDataError(f"user data is not JSON: {err}") from err
    if not isinstance(data, dict):
        raise UserDataError("user data must be a JSON object")
    for key in ("lab_id", "broker", "index", "peers", "role"):
        if key not in data:
            raise UserDataError(f"user data lacks {key!r}")
    role, peers, index = data["role"], data["peers"], data["index"]
    if role not in ROLES:
        raise UserDataError(f"role must be one of {ROLES}, got {role!r}")
    if not isinstance(peers, list) or not all(isinstance(p, str) for p in peers):
        raise UserDataError("peers must be a list of IP address strings")
    for p in peers:
        try:
            ipaddress.ip_address(p)
        except ValueError as err:
            raise UserDataError(f"peer {p!r} is not an IP address") from err
    if not isinstance(index, int) or isinstance(index, bool) or index < 0:
        raise UserDataError("index must be an integer >= 0")
    if role == "broker":
        if data["broker"] != image_broker:
            raise UserDataError(
                f"user data is for broker {data['broker']!r} but this image runs {image_broker!r}"
            )
        if index >= len(peers):
            raise UserDataError(f"index {index} is outside peers (size {len(peers)})")
    node = {
        "format_version": FORMAT_VERSION,
        "lab_id": str(data["lab_id"]),
        "broker": str(data["broker"]),
        "role": role,
        "index": index,
        "peers": peers,
        "self_ip": peers[index] if role == "broker" else data.get("self_ip"),
    }
    return node


def node_env(node: dict) -> str:
    lines = [
        f"MQLAB_LAB_ID={node['lab_id']}",
        f"MQLAB_BROKER={node['broker']}",
        f"MQLAB_ROLE={node['role']}",
        f"MQLAB_INDEX={node['index']}",
        f"MQLAB_SELF_IP={node['self_ip'] or ''}",
        f"MQLAB_PEERS={' '.join(node['peers'])}",
        f"MQLAB_CLUSTER_SIZE={len(node['peers'])}",
    ]
    lines += [f"MQLAB_PEER_{i}={ip}" for i, ip in enumerate(node["peers"])]
    return "\n".join(lines) + "\n"


def lab_secret(lab_id: str, purpose: str) -> str:
    """A per-lab value all nodes derive alike (cookies, cluster ids). Not a secret:
    the lab's security groups and firewall keep broker ports inside the VPC."""
    return hashlib.sha256(f"mqlab:{lab_id}:{purpose}".encode()).hexdigest()


def kafka_cluster_id(lab_id: str) -> str:
    raw = uuid.uuid5(uuid.NAMESPACE_URL, f"mqlab:{lab_id}").bytes
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _props(settings: dict) -> list[str]:
    def fmt(v: object) -> str:
        if isinstance(v, bool):
            return "true" if v else "false"
        if isinstance(v, list):
            return ",".join(str(x) for x in v)
        return str(v)

    return [f"{k}={fmt(v)}" for k, v in sorted(settings.items())]


def _yaml(settings: dict) -> list[str]:
    return [f"{k}: {json.dumps(v)}" for k, v in sorted(settings.items())]


def render(node: dict, image: dict) -> dict[str, str]:
    """File name -> content for this node's broker configuration."""
    b, data = image["broker"], image["data_dir"]
    # keys "mqlab.*" state what the profile expects (e.g. stream replicas) but are
    # not broker configuration; everything else is written into the config file
    s = {k: v for k, v in image["settings"].items() if not k.startswith("mqlab.")}
    i, me, peers = node["index"], node["self_ip"], node["peers"]
    lab = node["lab_id"]
    out: dict[str, str] = {}
    if b == "kafka":
        voters = ",".join(f"{n}@{ip}:9093" for n, ip in enumerate(peers))
        s |= {
            "node.id": i,
            "controller.quorum.voters": voters,
            "listeners": "PLAINTEXT://0.0.0.0:9092,CONTROLLER://0.0.0.0:9093",
            "advertised.listeners": f"PLAINTEXT://{me}:9092",
            "log.dirs": f"{data}/kafka",
        }
        out["server.properties"] = "\n".join(_props(s)) + "\n"
        out["cluster-id"] = kafka_cluster_id(lab) + "\n"
    elif b == "redpanda":
        seeds = "".join(f"    - host: {{address: {ip}, port: 33145}}\n" for ip in peers)
        out["redpanda.yaml"] = (
            "redpanda:\n"
            f"  data_directory: {data}/redpanda\n"
            f"  node_id: {i}\n"
            f"  rpc_server: {{address: 0.0.0.0, port: 33145}}\n"
            f"  advertised_rpc_api: {{address: {me}, port: 33145}}\n"
            f"  kafka_api:\n    - {{address: 0.0.0.0, port: 9092}}\n"
            f"  advertised_kafka_api:\n    - {{address: {me}, port: 9092}}\n"
            f"  seed_servers:\n{seeds}"
        )
        out[".bootstrap.yaml"] = "\n".join(_yaml(s)) + "\n"
    elif b == "rabbitmq":
        s |= {"cluster_formation.peer_discovery_backend": "classic_config"}
        s |= {
            f"cluster_formation.classic_config.nodes.{n + 1}": f"rabbit@{ip}"
            for n, ip in enumerate(peers)
        }
        out["rabbitmq.conf"] = "\n".join(f"{k} = {v}" for k, v in sorted(s.items())) + "\n"
        out["rabbitmq-env.conf"] = f"NODENAME=rabbit@{me}\nUSE_LONGNAME=true\n"
        out["erlang.cookie"] = lab_secret(lab, "erlang-cookie")[:32]
    elif b == "postgres":
        standbys = [f"mqlab_{n}" for n in range(1, len(peers))]
        s |= {
            "synchronous_standby_names": s["synchronous_standby_names"].replace(
                "STANDBYS", ", ".join(standbys)
            )
        }
        s["listen_addresses"] = "*"
        if i > 0:
            s["primary_conninfo"] = (
                f"host={peers[0]} port=5432 user=replicator application_name=mqlab_{i}"
            )
            s["primary_slot_name"] = f"mqlab_{i}"
        out["postgresql.conf"] = (
            "\n".join(
                f"{k} = {v if isinstance(v, int) else repr(str(v))}" for k, v in sorted(s.items())
            )
            + "\n"
        )
        out["pg_hba.conf"] = "local all all peer\n" + "".join(
            f"host {db} all {ip}/32 trust\n" for ip in peers for db in ("all", "replication")
        )
        out["role"] = ("primary" if i == 0 else "standby") + "\n"
    elif b == "nats":
        routes = ", ".join(f"nats://{ip}:6222" for ip in peers)
        out["nats.conf"] = (
            f"server_name: mqlab-{i}\nlisten: 0.0.0.0:4222\nhttp: 0.0.0.0:8222\n"
            f"jetstream {{\n  store_dir: {json.dumps(data + '/nats')}\n"
            f"  sync_interval: {s['jetstream.sync_interval']}\n}}\n"
            f"cluster {{\n  name: mqlab\n  listen: 0.0.0.0:6222\n  routes: [{routes}]\n}}\n"
        )
    elif b == "redis":
        s |= {"dir": f"{data}/redis", "bind": "0.0.0.0", "protected-mode": "no"}
        if i > 0:
            s["replicaof"] = f"{peers[0]} 6379"
            s["replica-announce-ip"] = me
        out["redis.conf"] = (
            "\n".join(
                f"{k} {'yes' if v is True else 'no' if v is False else v}"
                for k, v in sorted(s.items())
            )
            + "\n"
        )
    elif b == "mongodb":
        members = ", ".join(f'{{_id: {n}, host: "{ip}:27017"}}' for n, ip in enumerate(peers))
        out["mongod.conf"] = (
            f"storage:\n  dbPath: {data}/mongodb\n"
            f"net:\n  bindIp: 0.0.0.0\n  port: 27017\n"
            f"replication:\n  replSetName: {s['replSetName']}\n"
        )
        out["init.js"] = (
            f'rs.initiate({{_id: "{s["replSetName"]}", writeConcernMajorityJournalDefault: true, '
            f"members: [{members}]}});\n"
            f"db.adminCommand({{setDefaultRWConcern: 1, defaultWriteConcern: {{w: "
            f'"{s["defaultWriteConcern"]}", j: true}}}});\n'
        )
    elif b == "pulsar":
        zk = ",".join(f"{ip}:2181" for ip in peers)
        s |= {
            "metadataStoreUrl": f"zk:{zk}",
            "configurationMetadataStoreUrl": f"zk:{zk}",
            "advertisedAddress": me,
            "clusterName": "mqlab",
        }
        out["broker.conf"] = "\n".join(_props(s)) + "\n"
        out["bookkeeper.conf"] = (
            "\n".join(
                _props(
                    {
                        "metadataServiceUri": f"zk://{zk.replace(',', ';')}/ledgers",
                        "advertisedAddress": me,
                        "journalDirectories": f"{data}/pulsar/journal",
                        "ledgerDirectories": f"{data}/pulsar/ledgers",
                        "journalSyncData": True,
                    }
                )
            )
            + "\n"
        )
        out["zookeeper.conf"] = (
            "\n".join(
                [
                    f"dataDir={data}/pulsar/zookeeper",
                    "clientPort=2181",
                    "initLimit=10",
                    "syncLimit=5",
                ]
                + [f"server.{n + 1}={ip}:2888:3888" for n, ip in enumerate(peers)]
            )
            + "\n"
        )
        out["myid"] = f"{i + 1}\n"
    elif b == "artemis":
        others = [ip for n, ip in enumerate(peers) if n != i]
        connectors = "".join(
            f'      <connector name="n{n}">tcp://{ip}:61616</connector>\n'
            for n, ip in enumerate(peers)
        )
        statics = "".join(
            f"          <connector-ref>n{peers.index(ip)}</connector-ref>\n" for ip in others
        )
        ha = "primary" if i == 0 else "backup"
        extra = "".join(
            f"    <{k}>{str(v).lower() if isinstance(v, bool) else v}</{k}>\n"
            for k, v in sorted(s.items())
        )
        out["broker.xml"] = (
            '<configuration xmlns="urn:activemq">\n <core xmlns="urn:activemq:core">\n'
            f"    <name>mqlab-{i}</name>\n"
            f"    <paging-directory>{data}/artemis/paging</paging-directory>\n"
            f"    <bindings-directory>{data}/artemis/bindings</bindings-directory>\n"
            f"    <journal-directory>{data}/artemis/journal</journal-directory>\n"
            f"    <large-messages-directory>{data}/artemis/large</large-messages-directory>\n"
            f"{extra}    <connectors>\n{connectors}    </connectors>\n"
            "    <acceptors>\n"
            '      <acceptor name="all">tcp://0.0.0.0:61616</acceptor>\n    </acceptors>\n'
            f"    <ha-policy><replication><{ha}><group-name>mqlab</group-name></{ha}>"
            "</replication></ha-policy>\n"
            f'    <cluster-connections>\n      <cluster-connection name="mqlab">\n'
            f"        <connector-ref>n{i}</connector-ref>\n        <static-connectors>\n{statics}"
            "        </static-connectors>\n      </cluster-connection>\n"
            "    </cluster-connections>\n"
            " </core>\n</configuration>\n"
        )
    elif b == "rocketmq":
        s |= {
            "brokerClusterName": "mqlab",
            "brokerName": "mqlab-broker",
            "brokerIP1": me,
            "namesrvAddr": ";".join(f"{ip}:9876" for ip in peers),
            "storePathRootDir": f"{data}/rocketmq",
            "dLegerGroup": "mqlab-broker",
            "dLegerPeers": ";".join(f"n{n}-{ip}:40911" for n, ip in enumerate(peers)),
            "dLegerSelfId": f"n{i}",
        }
        out["broker.conf"] = "\n".join(_props(s)) + "\n"
    elif b == "eventstore":
        seeds = ",".join(f"{ip}:2113" for n, ip in enumerate(peers) if n != i)
        s |= {
            "Db": f"{data}/eventstore",
            "ClusterSize": len(peers),
            "DiscoverViaDns": False,
            "GossipSeed": seeds,
            "NodeIp": "0.0.0.0",
            "ReplicationIp": "0.0.0.0",
            "NodeHostAdvertiseAs": me,
            "ReplicationHostAdvertiseAs": me,
        }
        out["eventstore.conf"] = "---\n" + "\n".join(_yaml(s)) + "\n"
    else:
        raise UserDataError(f"no render recipe for broker {b!r}")
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="mqlab-node")
    sub = ap.add_subparsers(dest="cmd", required=True)
    bs = sub.add_parser("bootstrap")
    bs.add_argument("--broker", required=True)
    bs.add_argument("--user-data-file")
    bs.add_argument("--imds", default="http://169.254.169.254")
    bs.add_argument("--out", required=True)
    rd = sub.add_parser("render")
    rd.add_argument("--node", required=True)
    rd.add_argument("--image", required=True)
    rd.add_argument("--out", required=True)
    args = ap.parse_args(argv)
    try:
        if args.cmd == "bootstrap":
            if args.user_data_file:
                text = Path(args.user_data_file).read_text()
            else:
                text = fetch_user_data(args.imds)
            node = parse_user_data(text, args.broker)
            out = Path(args.out)
            out.mkdir(parents=True, exist_ok=True)
            (out / "node.json").write_text(json.dumps(node, indent=2) + "\n")
            (out / "node.env").write_text(node_env(node))
        else:
            node = json.loads(Path(args.node).read_text())
            image = json.loads(Path(args.image).read_text())
            out = Path(args.out)
            out.mkdir(parents=True, exist_ok=True)
            for name, content in render(node, image).items():
                (out / name).write_text(content)
    except UserDataError as err:
        print(f"mqlab-node: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
