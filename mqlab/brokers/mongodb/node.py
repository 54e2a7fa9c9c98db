"""MongoDB: a replica set of every node; node 0 runs ``init.js`` (rs.initiate).

Ports: ``mongo``. ``data_dir`` is ``storage.dbPath``. mongod also listens on
127.0.0.1 so that ``mongosh`` on the node reaches it without an address.
"""

from __future__ import annotations

import json

from mqlab.brokers.nodeconf import LOOPBACK, Node


def _w(concern: object) -> str:
    """A write concern's ``w`` as JavaScript: a number of members stays a number, a name
    ("majority", a custom tag set) is a string."""
    if isinstance(concern, int) and not isinstance(concern, bool):
        return str(concern)
    return json.dumps(str(concern))


def render(node: Node) -> dict[str, str]:
    s = node.config_settings()
    rs = s.get("replSetName", "mqlab")
    concern = s.get("defaultWriteConcern", "majority")
    bind = LOOPBACK if node.address == LOOPBACK else f"{LOOPBACK},{node.address}"
    members = ", ".join(
        f'{{_id: {i}, host: "{node.endpoint("mongo", i)}"}}' for i in range(node.nodes)
    )
    return {
        "mongod.conf": (
            f"storage:\n  dbPath: {node.data_dir}\n"
            f"net:\n  bindIp: {bind}\n  port: {node.port('mongo')}\n"
            f"replication:\n  replSetName: {rs}\n"
        ),
        "init.js": (
            f'rs.initiate({{_id: "{rs}", writeConcernMajorityJournalDefault: true, '
            f"members: [{members}]}});\n"
            f"db.adminCommand({{setDefaultRWConcern: 1, defaultWriteConcern: {{w: "
            f"{_w(concern)}, j: true}}}});\n"
        ),
    }
