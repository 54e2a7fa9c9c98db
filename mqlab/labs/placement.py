"""Where a run's broker nodes and workers go: the one seam between local and remote runs.

``for_scenario(s)`` turns ``cluster.target`` into hosts:

- ``local``: this machine for everything (``LocalHost``), workers from this checkout;
- ``netns``: a lab of network namespaces on this machine (``mqlab lab``), brought up
  for the run and removed afterwards unless one of that name was already up;
- ``ssh``: the hosts of an inventory file (``cluster.inventory``);
- ``aws``: the inventory of the scenario's live lab (``mqlab infra up``).

On every host that is not this machine, workers run from the shipped worker bundle
(``mqlab.labs.bundle``), never from the coordinator's checkout.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from mqlab.brokers.base import Endpoints
from mqlab.errors import FleetError, ScenarioError
from mqlab.hosts.base import Host
from mqlab.hosts.local import LocalHost
from mqlab.hosts.ssh import SshHost
from mqlab.labs.aws.inventory import Inventory
from mqlab.scenario.model import Scenario

LOG = logging.getLogger(__name__)
Progress = Callable[[str], None]
# test-only: "host=ms,host=ms" skews the wall clock of every mqlab process on those hosts
TEST_SKEW_ENV = "MQLAB_TEST_CLOCK_SKEW"


def _quiet(_msg: str) -> None:
    pass


@dataclass
class Placement:
    kind: str  # local | netns | ssh | aws
    name: str
    brokers: list[Host]
    senders: list[Host]
    receivers: list[Host]
    inventory: Inventory | None = None
    owned_lab: str | None = None  # a netns lab made for this run: removed by close()
    pythons: dict[str, str] = field(default_factory=dict)  # host name -> worker interpreter
    bundle: Any = None  # mqlab.labs.bundle.Bundle on remote placements
    nix_worker: Any = None  # mqlab.labs.nixworker.NixWorker when Nix hosts got the closure
    bundle_of: dict[str, str] = field(default_factory=dict)  # host name -> bundle hash

    @property
    def remote(self) -> bool:
        return self.kind != "local"

    def sender_host(self, node: int) -> Host:
        return self.senders[node % len(self.senders)]

    def receiver_host(self, node: int) -> Host:
        return self.receivers[node % len(self.receivers)]

    def client_hosts(self) -> list[Host]:
        seen: dict[str, Host] = {}
        for h in [*self.senders, *self.receivers]:
            seen.setdefault(h.name, h)
        return list(seen.values())

    def client_addresses(self) -> list[str]:
        """Where workers and the coordinator reach the brokers from."""
        if not self.remote:
            return []
        out = [h.address for h in self.client_hosts()]
        for b in self.brokers[:1]:
            seen = b.run(["sh", "-c", 'echo "${SSH_CLIENT%% *}"'], check=False).out.strip()
            if seen:
                out.append(seen)  # the coordinator, as the broker hosts see it
        return list(dict.fromkeys(out))

    @property
    def tunnels(self) -> bool:
        """The coordinator reaches the lab's private addresses only through SSH: on AWS,
        and on any lab whose hosts are reached over SSH at other addresses."""
        if self.kind == "aws":
            return True
        inv = self.inventory
        return inv is not None and any(h.ssh_address != h.private_ip for h in inv.hosts)

    @property
    def brokers_from_image(self) -> bool:
        """The lab's images start the broker nodes at boot (AWS); mqlab only checks them."""
        return self.kind == "aws"

    def reach(self, address: str, port: int) -> tuple[str, int]:
        """Where the coordinator connects to reach ``address:port`` of the lab."""
        if not self.tunnels:
            return address, port
        hosts = [*self.brokers, *self.senders, *self.receivers]
        via = next((h for h in hosts if h.address == address), hosts[0])
        return via.forward(address, port)

    def reachable(self, endpoints: Endpoints, follows_advertised: bool = False) -> Endpoints:
        """``endpoints`` as the coordinator connects to them (workers get the originals).

        Brokers that send clients on to the addresses they advertise (Kafka's metadata,
        a replica set's members; ``follows_advertised``) cannot be used through a tunnel:
        the coordinator must reach the lab's addresses itself, else a one-line refusal."""
        if not self.tunnels:
            return endpoints
        if follows_advertised:
            from mqlab.hosts import process

            unreached = [
                f"{n.host}:{n.port}"
                for n in endpoints.nodes
                if not process.port_open(n.host, n.port, timeout_s=2.0)
            ]
            if unreached:
                raise FleetError(
                    f"{endpoints.broker}: its clients follow the addresses the brokers "
                    f"advertise, and this coordinator cannot reach {', '.join(unreached)} "
                    "(an SSH tunnel is not enough): run mqlab on a host inside the lab's "
                    "network"
                )
            return endpoints
        nodes = []
        for n in endpoints.nodes:
            host, port = self.reach(n.host, n.port)
            nodes.append(dataclasses.replace(n, host=host, port=port))
        extra = dict(endpoints.extra)
        if extra.get("sentinels"):  # Redis Sentinel: the coordinator asks them too
            extra["sentinels"] = [list(self.reach(str(h), int(p))) for h, p in extra["sentinels"]]
        return dataclasses.replace(endpoints, nodes=tuple(nodes), extra=extra)

    def python(self, host: Host) -> str:
        return self.pythons.get(host.name, sys.executable)

    def env(self, host: Host) -> dict[str, str]:
        """Environment for mqlab processes on ``host`` (the test-only clock skew)."""
        for part in os.environ.get(TEST_SKEW_ENV, "").split(","):
            name, _, ms = part.partition("=")
            if name.strip() == host.name and ms.strip():
                return {"MQLAB_TEST_CLOCK_SKEW_MS": ms.strip()}
        return {}

    def runs_dir(self, host: Host, run_dir: Path) -> PurePosixPath:
        """Where workers on ``host`` keep their files during the run."""
        if host.is_local:  # absolute: workers run in their own folders
            return PurePosixPath(str(run_dir.resolve() / "workers"))
        return host.root / "runs" / run_dir.name

    def prepare_workers(self, progress: Progress = _quiet) -> None:
        """Ship (or find) the worker bundle on every client host and check it."""
        if not self.remote:
            return
        from mqlab.brokers import local
        from mqlab.labs import bundle, nixworker

        hosts = self.client_hosts()
        nix_hosts = {h.name for h in hosts if nixworker.is_nix_host(h)}
        if nix_hosts:
            flake = Path(__file__).resolve().parents[2]
            if (flake / "flake.nix").is_file():
                self.nix_worker, why = nixworker.build(flake)
            else:
                why = f"no flake.nix at {flake} (mqlab is not run from a checkout)"
            if self.nix_worker is None:
                progress(f"Nix hosts {', '.join(sorted(nix_hosts))} get the uv.lock bundle: {why}")
        if self.nix_worker is None or len(nix_hosts) < len(hosts):
            self.bundle = bundle.build(local.state_dir() / "bundles", progress)
        for h in hosts:
            if self.nix_worker is not None and h.name in nix_hosts:
                self.pythons[h.name] = nixworker.ensure_on(h, self.nix_worker, progress)
                self.bundle_of[h.name] = self.nix_worker.hash
            else:
                self.pythons[h.name] = bundle.ensure_on(h, self.bundle, progress)
                bundle.verify_on(h, self.bundle)
                self.bundle_of[h.name] = self.bundle.hash

    def lab_manifest(self) -> dict[str, Any]:
        hosts: dict[str, dict[str, Any]] = {}
        for role, group in (
            ("broker", self.brokers),
            ("sender", self.senders),
            ("receiver", self.receivers),
        ):
            for h in group:
                entry = hosts.setdefault(h.name, {"roles": [], "address": h.address})
                if role not in entry["roles"]:
                    entry["roles"].append(role)
        for name, entry in hosts.items():
            entry["role"] = "+".join(entry.pop("roles"))
            if name in self.bundle_of:
                entry["bundle"] = self.bundle_of[name]
        inv = self.inventory
        return {
            "kind": self.kind,
            "name": self.name,
            "price_per_hour_usd": inv.price_per_hour_usd if inv else None,
            "network": dict(inv.network) if inv else {},
            "hosts": hosts,
            "bundle": None
            if self.bundle is None
            else {
                "hash": self.bundle.hash,
                "python": self.bundle.python,
                "pins": list(self.bundle.pins),
            },
            "nix_worker": None if self.nix_worker is None else self.nix_worker.manifest(),
        }

    def close(self, progress: Progress = _quiet) -> None:
        for h in {id(h): h for h in [*self.brokers, *self.senders, *self.receivers]}.values():
            with contextlib.suppress(Exception):
                h.close()
        if self.owned_lab is not None:
            from mqlab.labs.netns import lab as netns_lab

            progress(f"removing lab {self.owned_lab}")
            netns_lab.down(self.owned_lab)
            self.owned_lab = None


def hosts_of(inv: Inventory) -> tuple[list[Host], list[Host], list[Host]]:
    def make(h: Any) -> Host:
        return SshHost(
            h.name,
            h.private_ip,
            ssh_address=h.ssh_address,
            user=inv.ssh_user,
            port=inv.ssh_port,
            key=inv.ssh_key,
            known_hosts=inv.known_hosts,
            root=inv.root_of(h),
        )

    return (
        [make(h) for h in inv.brokers],
        [make(h) for h in inv.senders],
        [make(h) for h in inv.receivers],
    )


def from_inventory(kind: str, inv: Inventory, owned_lab: str | None = None) -> Placement:
    brokers, senders, receivers = hosts_of(inv)
    if not senders or not receivers:
        raise FleetError(f"lab {inv.lab_id}: the inventory needs sender and receiver hosts")
    return Placement(kind, inv.lab_id, brokers, senders, receivers, inv, owned_lab)


def lab_name(s: Scenario) -> str:
    c = s.clients
    n = s.cluster.netns
    if n is not None and n.lab:
        return n.lab
    return f"b{s.cluster.nodes}s{c.sender_nodes}r{c.receiver_nodes}"


def for_scenario(s: Scenario, progress: Progress = _quiet) -> Placement:
    target = s.cluster.target
    if target == "local":
        here = LocalHost()
        return Placement("local", "local", [here] * s.cluster.nodes, [here], [here])
    if target == "netns":
        from mqlab.labs.netns import lab as netns_lab
        from mqlab.labs.netns import state as netns_state

        name = lab_name(s)
        n = s.cluster.netns
        delay, jitter = (n.delay_ms, n.jitter_ms) if n else (0.0, 0.0)
        existing = netns_state.find(name)
        owned = None
        if existing is None:
            progress(f"creating lab {name}: network namespaces with their own sshd")
            existing = netns_lab.up(
                name,
                brokers=s.cluster.nodes,
                senders=s.clients.sender_nodes,
                receivers=s.clients.receiver_nodes,
                delay_ms=delay,
                jitter_ms=jitter,
                progress=progress,
            )
            owned = name
        else:
            inv = existing.inventory
            have = (len(inv.brokers), len(inv.senders), len(inv.receivers))
            want = (s.cluster.nodes, s.clients.sender_nodes, s.clients.receiver_nodes)
            have_net = (
                float(inv.network.get("delay_ms", 0.0)),
                float(inv.network.get("jitter_ms", 0.0)),
            )
            if have != want or have_net != (delay, jitter):
                raise FleetError(
                    f"lab {name} is up with {have[0]} broker, {have[1]} sender and {have[2]} "
                    f"receiver hosts and netem {have_net[0]}/{have_net[1]} ms; the scenario needs "
                    f"{want[0]}/{want[1]}/{want[2]} and {delay}/{jitter} ms "
                    f"(mqlab lab down --name {name}, or set [cluster.netns] lab to another name)"
                )
            progress(f"using lab {name}, already up")
        try:
            return from_inventory("netns", existing.inventory, owned)
        except BaseException:
            if owned:
                netns_lab.down(owned)
            raise
    if target == "ssh":
        from mqlab.labs.aws import inventory

        path = Path(s.cluster.inventory)
        if not path.is_absolute():
            path = Path(s.source).parent / path
        if not path.is_file():
            raise ScenarioError(
                s.source,
                "cluster.inventory",
                f"{path} does not exist",
                "write the hosts' inventory",
            )
        return from_inventory("ssh", inventory.load(path))
    if target == "aws":
        from mqlab.labs.aws import lifecycle
        from mqlab.labs.aws.labs import spec_from_scenarios

        return from_inventory("aws", lifecycle.lab_inventory(spec_from_scenarios([s])))
    raise ScenarioError(s.source, "cluster.target", f"unknown target {target!r}")
