"""Network partitions between a lab's hosts: blackhole routes, added over SSH and removed.

A partition is a set of routes ``(host, address)``. On ``host``, ``ip route add blackhole
<address>/32`` makes the kernel drop every packet it would send to ``address``: a
connect fails at once, packets on open connections are retransmitted into nothing. A cut
between two hosts puts one route on each side (a symmetric cut): nothing crosses either
way, while each host still reaches everyone else, the coordinator's SSH connection
included. Only iproute2 and root are needed on the hosts (no iptables, no nft), and the
commands go through ``Host.run``: the same on netns lab hosts, ``ssh`` hosts and EC2.

The kinds (``Fault.partition``), for broker nodes ``0..n-1`` on their hosts:

- ``node_from_brokers``: node ``node``'s host from every other broker host; the clients
  still reach every node;
- ``leader_from_brokers``: the same, aimed at the host of the node that leads the queue
  at that moment (the old leader still hears from the clients: where replication is
  asynchronous, what it confirms while cut off can be lost when it rejoins);
- ``clients_from_leader``: every client host (senders and receivers) from the host of
  the node that leads the queue at that moment;
- ``majority_minority``: node ``node`` alone on one side; the other brokers and every
  client host on the other (the clients stay with the majority).

A host on both sides (one machine holding two roles) is not cut from itself. Routes
carry the protocol tag ``ROUTE_PROTO`` (``ip route show type blackhole proto 213`` lists
mqlab's), and healing deletes only routes that match type, address and tag *and* that
this cut added, or may have added: a command whose outcome is unknown (a lost
connection) counts as added, and its routes are deleted if they are there.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import shlex
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

from mqlab.archive import faultlog as fl
from mqlab.archive.faultlog import FaultEntry
from mqlab.errors import FleetError, MqlabError
from mqlab.faults import process
from mqlab.faults.target import Target, Where, now_ms, on_own_hosts
from mqlab.hosts.base import Host
from mqlab.scenario.model import LEADER_PARTITIONS

ROUTE_PROTO = 213  # the tag on mqlab's blackhole routes (`ip route ... proto 213`)
CMD_TIMEOUT_S = 30.0
T = TypeVar("T")


class Addressed(Protocol):
    """What planning needs of a host: its name and the address the others reach it at."""

    @property
    def name(self) -> str: ...

    @property
    def address(self) -> str: ...


@dataclass(frozen=True, order=True)
class Route:
    """A blackhole route on host ``host`` (by name) to ``address``."""

    host: str
    address: str


def between(side_a: Iterable[Addressed], side_b: Iterable[Addressed]) -> tuple[Route, ...]:
    """The routes that cut every host of ``side_a`` from every host of ``side_b``, both
    ways; a host on both sides (same name or address) is not cut from itself."""
    out: set[Route] = set()
    b_hosts = list(side_b)
    for a in side_a:
        for b in b_hosts:
            if a.name == b.name or a.address == b.address:
                continue
            out.add(Route(a.name, b.address))
            out.add(Route(b.name, a.address))
    return tuple(sorted(out))


def sides(
    kind: str, brokers: Sequence[Addressed], clients: Sequence[Addressed], node: int
) -> tuple[list[Addressed], list[Addressed]]:
    """The two sides of partition ``kind``; ``node`` is the isolated node, or for
    for ``leader_from_brokers`` and ``clients_from_leader`` the leader."""
    if not 0 <= node < len(brokers):
        raise FleetError(f"partition: node {node} does not exist (nodes 0..{len(brokers) - 1})")
    alone: list[Addressed] = [brokers[node]]
    others = [b for i, b in enumerate(brokers) if i != node]
    if kind in (fl.NODE_FROM_BROKERS, fl.LEADER_FROM_BROKERS):
        return alone, others
    if kind == fl.CLIENTS_FROM_LEADER:
        return alone, list(clients)
    if kind == fl.MAJORITY_MINORITY:
        return alone, [*others, *clients]
    raise FleetError(f"unknown partition {kind!r} (one of: {', '.join(fl.PARTITION_KINDS)})")


def plan(
    kind: str, brokers: Sequence[Addressed], clients: Sequence[Addressed], node: int
) -> tuple[Route, ...]:
    """The blackhole routes of partition ``kind`` (pure: nothing is run)."""
    a, b = sides(kind, brokers, clients, node)
    routes = between(a, b)
    for r in routes:
        try:
            ipaddress.ip_address(r.address)
        except ValueError:
            raise FleetError(
                f"partition: {r.address!r} is not an IP address (blackhole routes need the "
                "hosts' addresses in the inventory, not names)"
            ) from None
    return routes


def describe(kind: str, node: int) -> str:
    """One line for the run's progress and the report: what is cut from what."""
    if kind == fl.NODE_FROM_BROKERS:
        return f"partition: node {node} from brokers"
    if kind == fl.LEADER_FROM_BROKERS:
        return f"partition: leader (node {node}) from brokers"
    if kind == fl.CLIENTS_FROM_LEADER:
        return f"partition: clients from leader (node {node})"
    if kind == fl.MAJORITY_MINORITY:
        return f"partition: node {node} in the minority"
    return f"partition: {kind}"


def _prefix(address: str) -> str:
    ip = ipaddress.ip_address(address)
    return f"{ip}/{ip.max_prefixlen}"


def route_command(verb: str, address: str) -> list[str]:
    """``ip route add|del blackhole ADDRESS/32 proto 213``."""
    return ["ip", "route", verb, "blackhole", _prefix(address), "proto", str(ROUTE_PROTO)]


def _by_host(routes: Iterable[Route]) -> dict[str, list[Route]]:
    out: dict[str, list[Route]] = {}
    for r in sorted(routes):
        out.setdefault(r.host, []).append(r)
    return out


def _listed(text: str) -> set[str]:
    """Addresses of ``ip route show type blackhole`` lines (``blackhole 10.0.0.1 ...``)."""
    out = set()
    for line in text.splitlines():
        fields = line.split()
        if len(fields) >= 2 and fields[0] == "blackhole":
            try:
                out.add(str(ipaddress.ip_network(fields[1], strict=False).network_address))
            except ValueError:
                continue
    return out


@dataclass
class Cut:
    """One partition: its routes, the hosts they go on, and which are in place now."""

    kind: str
    node: int
    routes: tuple[Route, ...]
    hosts: Mapping[str, Host]
    in_place: set[Route] = field(default_factory=set)  # added, or perhaps added
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)
    # held while apply's commands run: a heal from another thread (a run stopping while its
    # fault thread adds the routes) waits for them, or a route added on a host before
    # ``in_place`` names it would be left behind
    _applying: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    @property
    def label(self) -> str:
        return describe(self.kind, self.node)

    def apply(self) -> None:
        """Add every route: one command per host, on every host at once (the cut starts
        everywhere within one command's time). FleetError naming each host that failed;
        what was added is tracked in ``in_place`` even then, and ``heal`` removes it."""
        with self._applying:
            try:
                outcomes = _at_once(_by_host(self.routes), self._add_on)
            except BaseException:  # interrupted (the commands have ended): heal tries them all
                self.in_place.update(self.routes)
                raise
        errors = [str(o) for o in outcomes.values() if isinstance(o, FleetError)]
        if errors:
            raise FleetError("; ".join(errors))

    def _add_on(self, name: str, routes: list[Route]) -> None:
        script = " && ".join(
            f"{shlex.join(route_command('add', r.address))} && echo added {shlex.quote(r.address)}"
            for r in routes
        )
        try:
            res = self.hosts[name].run(script, timeout_s=CMD_TIMEOUT_S, check=False)
        except FleetError:
            with self._lock:
                self.in_place.update(routes)  # unknown outcome: heal tries each of them
            raise
        added = {line.split()[1] for line in res.out.splitlines() if line.startswith("added ")}
        with self._lock:
            self.in_place.update(r for r in routes if r.address in added)
        if res.rc != 0:
            failed = next((r for r in routes if r.address not in added), routes[0])
            why = (res.err or res.out).strip().splitlines()[-1:] or [f"exit {res.rc}"]
            fix = "iproute2 and root are needed on the host"
            if "File exists" in why[0]:
                fix = (
                    "a route to that address is already there, perhaps left by a run that "
                    f"was killed: `{shlex.join(route_command('del', failed.address))}` on {name}"
                )
            raise FleetError(
                f"{name}: cannot add a blackhole route to {failed.address} ({why[0]}; {fix})"
            )

    def heal(self) -> dict[str, str]:
        """Delete every route this cut has in place, on every host at once; ``{host: why}``
        for hosts where some are left. A host that fails is retried while others heal (a
        coordinator on a lab host reaches a peer only once its own side of the cut is
        gone). An apply still running in another thread is waited for first (its
        commands end within their timeout)."""
        with self._applying:
            return self._heal()

    def _heal(self) -> dict[str, str]:
        problems: dict[str, str] = {}
        while self.in_place:
            groups = _by_host(self.in_place)
            outcomes = _at_once(groups, self._heal_host)
            progressed = False
            for name, routes in groups.items():
                left = outcomes[name]
                if isinstance(left, FleetError):
                    problems[name] = str(left)
                    continue
                healed = set(routes) - left
                progressed = progressed or bool(healed)
                self.in_place -= healed
                if left:
                    problems[name] = "still there: " + ", ".join(sorted(r.address for r in left))
                else:
                    problems.pop(name, None)
            if not progressed:
                break
        return problems

    def _heal_host(self, name: str, routes: list[Route]) -> set[Route]:
        """Delete ``routes`` on host ``name`` (absent ones are fine); the ones still there."""
        dels = "; ".join(
            f"{shlex.join(route_command('del', r.address))} 2>/dev/null" for r in routes
        )
        families = sorted({ipaddress.ip_address(r.address).version for r in routes})
        show = " && ".join(
            f"ip -{v} route show type blackhole proto {ROUTE_PROTO}" for v in families
        )
        res = self.hosts[name].run(f"{dels}; {show}", timeout_s=CMD_TIMEOUT_S, check=False)
        if res.rc != 0:
            raise FleetError(
                f"{name}: cannot list blackhole routes ({(res.err or res.out).strip()[-200:]})"
            )
        there = _listed(res.out)
        return {r for r in routes if str(ipaddress.ip_address(r.address)) in there}


def _at_once(
    groups: Mapping[str, list[Route]], fn: Callable[[str, list[Route]], T]
) -> dict[str, T | FleetError]:
    """``fn(host, routes)`` for every host in its own thread; each host's result or its
    FleetError. Returns (or raises) only once every command has ended."""
    with ThreadPoolExecutor(max_workers=max(1, len(groups))) as pool:
        futures = {name: pool.submit(fn, name, routes) for name, routes in groups.items()}
        out: dict[str, T | FleetError] = {}
        for name, fut in futures.items():
            try:
                out[name] = fut.result()
            except FleetError as e:
                out[name] = e
        return out


def unhealed_message(cut: Cut, problems: Mapping[str, str]) -> str:
    """One line: which routes are left where, and how a person removes them."""
    left = ", ".join(f"{r.host} -> {r.address}" for r in sorted(cut.in_place))
    why = "; ".join(f"{h}: {p.removeprefix(f'{h}: ')}" for h, p in sorted(problems.items()))
    return (
        f"{cut.label}: not healed ({why}); blackhole routes left: {left} (remove each with "
        f"`ip route del blackhole ADDRESS/32 proto {ROUTE_PROTO}` on its host; a netns lab: "
        "`mqlab lab down`)"
    )


ACTIONS = (fl.PARTITION,)


def check(f: Any, where: Where) -> None:
    on_own_hosts(where, "a partition")


def apply(f: Any, target: Target) -> None:
    """Cut hosts apart with blackhole routes; healed later (:func:`heal`)."""
    cluster = target.cluster
    node = f.node
    if f.partition in LEADER_PARTITIONS:
        node = process.leader(cluster, target.driver, f"partition {f.partition}")
    at_ms = now_ms()
    on_own_hosts(target, "a partition")
    clients = target.client_hosts()
    routes = plan(f.partition, cluster.hosts, clients, node)
    hosts = {h.name: h for h in [*cluster.hosts, *clients]}
    cut = Cut(f.partition, node, routes, hosts)
    key = len(target.log)
    entry = FaultEntry.applied(
        dataclasses.asdict(f), node, at_ms, routes=[[r.host, r.address] for r in routes]
    )
    target.log.append(entry)
    target.cuts[key] = cut  # before a route is added: whatever happens next, it is healed
    target.phase(f"fault: {cut.label} for {f.duration_s:g} s ({len(routes)} blackhole routes)")
    try:
        cut.apply()
    except MqlabError as e:
        entry.error = str(e)
        raise
    target.pending.append((f.at_s + f.duration_s, fl.HEAL, key))


def heal(cut: Cut, key: int, target: Target) -> None:
    """Remove the routes of the partition at fault log entry ``key``; FleetError naming
    what is left if any is."""
    target.phase(f"fault: healing the {cut.label}")
    problems = cut.heal()
    del target.cuts[key]  # only now: interrupted half-way, the rest is healed on the way out
    entry = FaultEntry(fl.HEAL, cut.node, now_ms(), details={"partition": cut.kind})
    target.log.append(entry)
    if cut.in_place:
        entry.error = unhealed_message(cut, problems)
        entry.details["routes_left"] = [[r.host, r.address] for r in sorted(cut.in_place)]
        raise FleetError(entry.error)
