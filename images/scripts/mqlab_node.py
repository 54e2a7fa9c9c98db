#!/usr/bin/env python3
"""Boot-time node configuration for mqlab's NixOS images (stdlib only).

mqlab_node.py bootstrap --broker B [--user-data-file F | --imds URL] --out /run/mqlab
    reads EC2 user data (the JSON contract in docs/node-bootstrap.md), validates
    it and writes node.json and node.env (systemd EnvironmentFile).
mqlab_node.py render --node /run/mqlab/node.json --image /etc/mqlab/broker.json --out DIR
    writes the broker's config files for this node: the durability settings
    baked into the image plus node index, own IP and peers' IPs, rendered by
    mqlab.brokers.nodeconf, the one home of every broker's node configuration (local
    clusters render with it too). The image ships mqlab/brokers next to this
    script (images/base.nix); in the repository it sits two directories up.
"""

from __future__ import annotations

import argparse
import ipaddress
import json
import sys
import urllib.request
from pathlib import Path


def _nodeconf_home() -> Path:
    """The directory holding mqlab/brokers: next to this script on the image,
    the repository root (two levels up) in a checkout."""
    here = Path(__file__).absolute().parent
    for home in (here, here.parent.parent):
        if (home / "mqlab" / "brokers" / "nodeconf.py").is_file():
            return home
    raise SystemExit(f"mqlab-node: mqlab/brokers not found next to {here} or two levels up")


if str(_nodeconf_home()) not in sys.path:
    sys.path.insert(0, str(_nodeconf_home()))

from mqlab.brokers import nodeconf  # noqa: E402

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


def render(node: dict, image: dict) -> dict[str, str]:
    """File name -> content for this node's broker configuration (mqlab.brokers.nodeconf)."""
    broker = image["broker"]
    if broker not in nodeconf.brokers():
        raise UserDataError(f"no render recipe for broker {broker!r}")
    try:
        return nodeconf.render(
            nodeconf.Node(
                broker=broker,
                index=node["index"],
                addresses=tuple(node["peers"]),
                ports=nodeconf.standard_ports(broker, len(node["peers"])),
                data_dir=f"{image['data_dir']}/{broker}",
                lab_id=node["lab_id"],
                settings=dict(image["settings"]),
            )
        )
    except nodeconf.NodeConfError as err:
        raise UserDataError(str(err)) from err


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
