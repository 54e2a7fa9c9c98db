"""PostgreSQL: a primary (node 0) and synchronous streaming standbys (nodes 1..).

One naming for standbys everywhere: standby ``i`` is ``s<i>`` (``standby_name``),
its ``application_name`` and its physical replication slot alike, and the primary
lists them in ``synchronous_standby_names``.

Files:

* ``postgresql.conf``: the mqlab settings block, the same on every node except
  its own ``listen_addresses``. Locally it is appended to the primary's initdb
  configuration (standbys copy it with ``pg_basebackup``); on an image it is the
  whole ``config_file``.
* ``standby.conf`` (standbys): ``primary_conninfo`` (with ``application_name``)
  and ``primary_slot_name``, to append to the standby's ``postgresql.auto.conf``
  after ``pg_basebackup -R`` (whose own ``primary_conninfo`` there would otherwise
  win over any config file).
* ``standbys`` (primary): the standby names, one a line, for creating their slots.
* ``pg_hba.conf``: trust from the cluster's nodes; ``role``: primary or standby.

Ports: ``pg``. ``data_dir`` is not written (the data directory is given on the
command line). Access differs by where the nodes are: on loopback the database
superuser ``postgres`` replicates and local sockets trust; on hosts of their own
the role ``replicator`` replicates and local sockets use ``peer``.
"""

from __future__ import annotations

import re
from typing import Any

from mqlab.brokers.nodeconf import Node, lines

STANDBYS_PLACEHOLDER = "STANDBYS"  # in an image's synchronous_standby_names
LOCAL_USER = "postgres"  # the superuser local clusters create (initdb -U) and replicate as
HOST_USER = "replicator"  # the replication role images create on the primary
_BARE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*|-?[0-9]+")


def standby_name(index: int) -> str:
    """Application name and replication slot of standby ``index`` (1..)."""
    return f"s{index}"


def standby_names(nodes: int) -> list[str]:
    return [standby_name(i) for i in range(1, nodes)]


def sync_standby_names(nodes: int) -> str:
    """``ANY 1 (s1, s2)`` for 3 nodes; empty (no synchronous standby) for 1."""
    names = standby_names(nodes)
    return f"ANY 1 ({', '.join(names)})" if names else ""


def local_settings(nodes: int) -> dict[str, Any]:
    """What local clusters run with (settings={}): a commit returns once ANY 1
    standby has written the WAL (``remote_write``)."""
    return {
        "max_connections": 300,
        "wal_level": "replica",
        "max_wal_senders": nodes + 4,
        "max_replication_slots": nodes + 4,
        "hot_standby": "on",
        "synchronous_standby_names": sync_standby_names(nodes),
        "synchronous_commit": "remote_write",
        "fsync": "on",
    }


def quote(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


def conf_value(v: object) -> str:
    """A postgresql.conf value: numbers and simple words bare, anything else quoted."""
    if isinstance(v, bool):
        return "on" if v else "off"
    text = str(v)
    return text if _BARE.fullmatch(text) else quote(text)


def replication_user(node: Node) -> str:
    return LOCAL_USER if node.loopback else HOST_USER


def settings(node: Node) -> dict[str, Any]:
    """This node's postgresql.conf settings, in file order."""
    conf: dict[str, Any] = {"listen_addresses": node.address}
    given = node.config_settings()
    if not given:
        return conf | local_settings(node.nodes)
    for key, value in given.items():
        if key == "synchronous_standby_names" and STANDBYS_PLACEHOLDER in str(value):
            names = ", ".join(standby_names(node.nodes))
            value = str(value).replace(STANDBYS_PLACEHOLDER, names) if names else ""
        conf[key] = value
    return conf


def postgresql_conf(node: Node) -> str:
    return "\n# written by mqlab\n" + lines(
        [f"{k} = {conf_value(v)}" for k, v in settings(node).items()]
    )


def primary_conninfo(node: Node, user: str | None = None) -> str:
    """How standby ``node`` reaches the primary, naming itself ``standby_name``."""
    return (
        f"host={node.addresses[0]} port={node.port('pg', 0)} "
        f"user={user or replication_user(node)} application_name={standby_name(node.index)}"
    )


def standby_settings(node: Node, user: str | None = None) -> str:
    """primary_conninfo and primary_slot_name of a standby, for postgresql.auto.conf."""
    if node.index == 0:
        raise ValueError("node 0 is the primary, not a standby")
    return (
        "# mqlab: the standby's name in synchronous_standby_names\n"
        f"primary_conninfo = {quote(primary_conninfo(node, user))}\n"
        f"primary_slot_name = {quote(standby_name(node.index))}\n"
    )


def _host_mask(address: str) -> str:
    return f"{address}/128" if ":" in address else f"{address}/32"


def hba(addresses: tuple[str, ...] | list[str], local_auth: str = "trust") -> str:
    """pg_hba.conf: trust (databases and replication) from every node's address."""
    unique = list(dict.fromkeys(addresses))
    where = "loopback only" if unique == ["127.0.0.1"] else "from the cluster's nodes"
    out = [
        f"# written by mqlab: trust, {where}",
        f"local all all {local_auth}",
        f"local replication all {local_auth}",
    ]
    for a in unique:
        out += [
            f"host all all {_host_mask(a)} trust",
            f"host replication all {_host_mask(a)} trust",
        ]
    return lines(out)


def render(node: Node) -> dict[str, str]:
    out = {
        "postgresql.conf": postgresql_conf(node),
        "pg_hba.conf": hba(node.addresses, "trust" if node.loopback else "peer"),
        "role": ("primary" if node.index == 0 else "standby") + "\n",
    }
    if node.index == 0:
        out["standbys"] = "".join(f"{n}\n" for n in standby_names(node.nodes))
    else:
        out["standby.conf"] = standby_settings(node)
    return out
