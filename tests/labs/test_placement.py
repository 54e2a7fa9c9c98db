"""How the coordinator reaches a lab's brokers: directly, or through SSH tunnels."""

from __future__ import annotations

import socket

from mqlab.brokers.base import Endpoints, NodeEndpoint
from mqlab.errors import FleetError
from mqlab.hosts.local import LocalHost
from mqlab.labs.aws.inventory import Host, Inventory
from mqlab.labs.placement import Placement, from_inventory


def _inventory(kind: str, public: bool) -> Inventory:
    def h(role: str, i: int, ip: str) -> Host:
        return Host(role, i, ip, f"198.51.100.{ip.rsplit('.', 1)[1]}" if public else "", "")

    return Inventory(
        lab_id="lab",
        region="r",
        ssh_user="root",
        broker="nats",
        expires_at="",
        brokers=(h("broker", 0, "10.0.0.10"), h("broker", 1, "10.0.0.11")),
        senders=(h("sender", 0, "10.0.0.20"),),
        receivers=(h("receiver", 0, "10.0.0.30"),),
        kind=kind,
    )


class _Tunnels:
    """Records which host a tunnel went through (a stand-in for SshHost.forward)."""

    def __init__(self, placement: Placement) -> None:
        self.used: list[tuple[str, str, int]] = []
        for h in [*placement.brokers, *placement.senders, *placement.receivers]:
            h.forward = self._via(h.name)  # type: ignore[method-assign]

    def _via(self, name: str):
        def forward(address: str, port: int) -> tuple[str, int]:
            self.used.append((name, address, port))
            return "127.0.0.1", 40000 + len(self.used)

        return forward


def test_direct_on_a_lab_whose_addresses_the_coordinator_shares() -> None:
    p = from_inventory("ssh", _inventory("ssh", public=False))
    assert not p.tunnels and not p.brokers_from_image
    assert p.reach("10.0.0.10", 4222) == ("10.0.0.10", 4222)
    eps = Endpoints("nats", (NodeEndpoint(0, "10.0.0.10", 4222),))
    assert p.reachable(eps) is eps


def test_aws_tunnels_through_the_node_own_host_and_keeps_the_rest() -> None:
    p = from_inventory("aws", _inventory("aws", public=True))
    assert p.tunnels and p.brokers_from_image
    t = _Tunnels(p)
    eps = Endpoints(
        "nats",
        (NodeEndpoint(0, "10.0.0.10", 4222, {"x": 1}), NodeEndpoint(1, "10.0.0.11", 4222)),
        {"e": 2},
    )
    out = p.reachable(eps)
    assert [(n.index, n.host, n.port, n.extra) for n in out.nodes] == [
        (0, "127.0.0.1", 40001, {"x": 1}),
        (1, "127.0.0.1", 40002, {}),
    ]
    assert out.extra == {"e": 2} and out.broker == "nats"
    # Redis Sentinels named in the endpoints are reached through tunnels as well
    sentinels = Endpoints("redis", (), {"sentinels": [["10.0.0.11", 26379]], "master": "m"})
    assert p.reachable(sentinels).extra == {"sentinels": [["127.0.0.1", 40003]], "master": "m"}
    assert t.used[-1] == ("broker-1", "10.0.0.11", 26379)
    assert t.used[:2] == [("broker-0", "10.0.0.10", 4222), ("broker-1", "10.0.0.11", 4222)]
    # the originals are untouched: workers inside the lab get the private addresses
    assert [n.host for n in eps.nodes] == ["10.0.0.10", "10.0.0.11"]
    # an address no host has goes through the first host
    assert p.reach("10.0.0.99", 80) == ("127.0.0.1", 40004)
    assert t.used[-1] == ("broker-0", "10.0.0.99", 80)


def test_an_ssh_inventory_reached_at_other_addresses_uses_tunnels() -> None:
    p = from_inventory("ssh", _inventory("ssh", public=True))
    assert p.tunnels and not p.brokers_from_image


def test_listening_sees_a_listening_port_and_not_a_closed_one() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(1)
        port = s.getsockname()[1]
        with socket.socket() as closed:
            closed.bind(("127.0.0.1", 0))  # bound, not listening
            other = closed.getsockname()[1]
            assert LocalHost().listening([port, other]) == [True, False]


def test_brokers_that_follow_advertised_addresses_are_reached_directly_or_refused() -> None:
    """Kafka-like clients go on to the addresses the brokers advertise: through tunnels
    the coordinator uses the endpoints as they are when it reaches them, else it says so."""
    p = from_inventory("aws", _inventory("aws", public=True))
    t = _Tunnels(p)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(1)
        port = s.getsockname()[1]
        eps = Endpoints("kafka", (NodeEndpoint(0, "127.0.0.1", port),))
        assert p.reachable(eps, follows_advertised=True) is eps
    assert not t.used  # no tunnel for them
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed = s.getsockname()[1]  # bound, not listening: refused
        eps = Endpoints("kafka", (NodeEndpoint(0, "127.0.0.1", closed),))
        try:
            p.reachable(eps, follows_advertised=True)
        except FleetError as e:
            msg = str(e)
        else:
            raise AssertionError("no refusal")
    assert "\n" not in msg and f"cannot reach 127.0.0.1:{closed}" in msg
    assert "inside the lab's network" in msg
