"""mqlab.brokers.redis.node: the Redis Sentinel beside every node (``sentinel.conf``), and a
node's ``redis.conf`` as a replica of whichever node is the primary after a failover."""

from __future__ import annotations

import shlex

import pytest

from mqlab.brokers import nodeconf
from mqlab.brokers.nodeconf import Node
from mqlab.brokers.redis import node as redisconf

LOCAL = ("127.0.0.1",) * 3
HOSTS = ("10.0.1.10", "10.0.1.11", "10.0.1.12")
PORTS = {"client": (6401, 6402, 6403), "sentinel": (26401, 26402, 26403)}


def parse(text: str) -> list[list[str]]:
    """The directives of a Redis config file: one token list per non-comment line."""
    return [shlex.split(line) for line in text.splitlines() if line and not line.startswith("#")]


REPEATED = ("sentinel known-replica", "sentinel known-sentinel")  # one line per peer


def sentinel_directives(text: str) -> dict[str, list[str]]:
    """``sentinel <name> ...`` lines by name, the other directives by their keyword; the
    lines naming peers (``known-replica``, ``known-sentinel``) joined, one " | " apart."""
    out: dict[str, list[str]] = {}
    for tokens in parse(text):
        key = f"sentinel {tokens[1]}" if tokens[0] == "sentinel" else tokens[0]
        value = tokens[2:] if tokens[0] == "sentinel" else tokens[1:]
        if key in REPEATED and key in out:
            out[key] = [*out[key], "|", *value]
            continue
        assert key not in out, f"{key} twice"
        out[key] = value
    return out


def local(index: int, nodes: int = 3) -> Node:
    ports = {k: v[:nodes] for k, v in PORTS.items()}
    return Node("redis", index, LOCAL[:nodes], ports, f"/tmp/c/n{index}")


@pytest.mark.parametrize("i", range(3))
def test_every_local_sentinel_listens_on_its_own_port_and_monitors_node_0(i: int) -> None:
    conf = sentinel_directives(nodeconf.render(local(i))["sentinel.conf"])
    assert conf.pop("bind") == ["127.0.0.1"]
    assert conf.pop("port") == [str(PORTS["sentinel"][i])]
    assert conf.pop("dir") == [f"/tmp/c/n{i}"]  # it rewrites its config file there
    assert conf.pop("daemonize") == ["no"] and conf.pop("protected-mode") == ["no"]
    assert conf.pop("sentinel announce-ip") == ["127.0.0.1"]
    assert conf.pop("sentinel announce-port") == [str(PORTS["sentinel"][i])]
    # the starting primary, node 0, under the name clients ask for, quorum 2 of 3
    assert conf.pop("sentinel monitor") == ["mqlab", "127.0.0.1", "6401", "2"]
    down_after = conf.pop("sentinel down-after-milliseconds")
    timeout = conf.pop("sentinel failover-timeout")
    syncs = conf.pop("sentinel parallel-syncs")
    assert down_after[0] == timeout[0] == syncs[0] == "mqlab"
    # a failover within ~10 s, yet no false one when the primary is briefly slow
    assert 1000 <= int(down_after[1]) <= 2000 and int(timeout[1]) <= 10_000
    assert syncs[1] == "1"
    # it knows the replicas and the other sentinels (their ids as they state them) at once
    ids = [redisconf.sentinel_id(local(i), j) for j in range(3)]
    assert conf.pop("sentinel myid") == [ids[i]]
    assert len(set(ids)) == 3 and all(len(x) == 40 for x in ids)
    assert conf.pop("sentinel known-replica") == [
        "mqlab",
        "127.0.0.1",
        "6402",
        "|",
        "mqlab",
        "127.0.0.1",
        "6403",
    ]
    others = [j for j in range(3) if j != i]
    expected: list[str] = []
    for j in others:
        expected += [*(["|"] if expected else []), "mqlab", "127.0.0.1", str(PORTS["sentinel"][j])]
        expected.append(ids[j])
    assert conf.pop("sentinel known-sentinel") == expected
    assert conf == {}, f"unexpected directives: {conf}"


def test_sentinels_on_hosts_use_the_standard_ports_and_their_own_address() -> None:
    ports = nodeconf.standard_ports("redis", 3)
    assert ports == {"client": (6379,) * 3, "sentinel": (26379,) * 3}
    for i, address in enumerate(HOSTS):
        node = Node("redis", i, HOSTS, ports, "/var/lib/mqlab/redis", "lab-7", {"appendonly": 1})
        conf = sentinel_directives(nodeconf.render(node)["sentinel.conf"])
        assert conf["bind"] == [address] and conf["port"] == ["26379"]
        assert conf["sentinel announce-ip"] == [address]
        assert conf["sentinel monitor"] == ["mqlab", "10.0.1.10", "6379", "2"]
        assert conf["dir"] == ["/var/lib/mqlab/redis"]


@pytest.mark.parametrize(("nodes", "quorum"), [(1, 1), (2, 2), (3, 2), (5, 3)])
def test_the_quorum_is_a_majority_of_the_nodes(nodes: int, quorum: int) -> None:
    addresses = tuple(f"10.0.1.{10 + i}" for i in range(nodes))
    node = Node("redis", 0, addresses, nodeconf.standard_ports("redis", nodes), "/d")
    conf = sentinel_directives(nodeconf.render(node)["sentinel.conf"])
    assert conf["sentinel monitor"][-1] == str(quorum)
    assert redisconf.quorum(node) == quorum


def test_a_restarted_node_replicates_the_primary_of_now() -> None:
    """After a failover to node 2, the launcher renders a restarted node 0 as its replica."""
    old = {tuple(t) for t in parse(redisconf.redis_conf(local(0), primary=2))}
    assert ("replicaof", "127.0.0.1", "6403") in old and ("port", "6401") in old
    new = parse(redisconf.redis_conf(local(2), primary=2))
    assert not any(t[0] == "replicaof" for t in new)
    # the starting layout is primary 0
    assert redisconf.redis_conf(local(1)) == nodeconf.render(local(1))["redis.conf"]
    assert ["replicaof", "127.0.0.1", "6401"] in parse(redisconf.redis_conf(local(1)))
    with pytest.raises(nodeconf.NodeConfError, match="primary 3 is outside"):
        redisconf.redis_conf(local(0), primary=3)


def test_a_sentinel_needs_its_port() -> None:
    node = Node("redis", 0, LOCAL, {"client": PORTS["client"]}, "/d")
    with pytest.raises(nodeconf.NodeConfError, match="no 'sentinel' port given"):
        nodeconf.render(node)
