"""`mqlab lab up|status|down`: a lab of hosts (network namespaces) on this machine."""

from __future__ import annotations

from typing import Any

import click
from rich.console import Console
from rich.table import Table

from mqlab.labs.netns import lab as netns_lab
from mqlab.labs.netns import plan as netns_plan
from mqlab.labs.netns import state as netns_state

ERR = Console(stderr=True, log_path=False)
OUT = Console()
if not OUT.is_terminal:
    OUT = Console(width=160)  # tables stay readable when piped or captured

NAME_OPTION = click.option("--name", default="lab", show_default=True, help="The lab's name.")


@click.group()
def lab() -> None:
    """A multi-host lab on this machine: network namespaces with their own sshd."""


@lab.command()
@NAME_OPTION
@click.option(
    "--brokers", type=click.IntRange(0, netns_plan.MAX_HOSTS), default=3, show_default=True
)
@click.option(
    "--senders", type=click.IntRange(0, netns_plan.MAX_HOSTS), default=1, show_default=True
)
@click.option(
    "--receivers", type=click.IntRange(0, netns_plan.MAX_HOSTS), default=2, show_default=True
)
@click.option("--delay-ms", type=click.FloatRange(0, 1000), default=0.0, help="netem delay.")
@click.option("--jitter-ms", type=click.FloatRange(0, 1000), default=0.0, help="netem jitter.")
def up(
    name: str, brokers: int, senders: int, receivers: int, delay_ms: float, jitter_ms: float
) -> None:
    """Create the lab (or reuse it when it is up with this shape): hosts, sshd, inventory."""
    with ERR.status("lab up") as spinner:
        made = netns_lab.up(
            name, brokers, senders, receivers, delay_ms, jitter_ms, progress=spinner.update
        )
    inv = made.inventory
    net = inv.network
    t = Table(
        title=f"lab {made.name} ({net.get('subnet')}, coordinator {net.get('coordinator_ip')})"
    )
    for col in ("Host", "Address", "Namespace", "Remote root"):
        t.add_column(col)
    for h in inv.hosts:
        t.add_row(h.name, h.private_ip, h.instance_id, inv.root_of(h))
    OUT.print(t)
    if inv.network.get("delay_ms"):
        OUT.print(f"netem: {inv.network['delay_ms']:g} ms ± {inv.network['jitter_ms']:g} ms")
    OUT.print(f"inventory: {made.inventory_path}", highlight=False)


@lab.command()
@click.option("--name", default=None, help="One lab (default: every lab).")
def status(name: str | None) -> None:
    """Show labs: hosts, addresses, whether each namespace and sshd is alive, netem."""
    names = [name] if name else netns_state.list_labs()
    if not names:
        OUT.print("no labs")
    for n in names:
        _print_status(netns_state.status(n))


def _print_status(s: dict[str, Any]) -> None:
    state = "up" if s["up"] else f"NOT up ({s['state']})"
    netem = s.get("netem") or {}
    delay = (
        f", netem {netem['delay_ms']:g} ± {netem['jitter_ms']:g} ms"
        if netem.get("delay_ms")
        else ""
    )
    t = Table(title=f"lab {s['name']}: {state}, {s.get('subnet') or '?'}{delay}")
    for col in ("Host", "Address", "Namespace", "Namespace exists", "sshd pid", "sshd alive"):
        t.add_column(col)
    for h in s["hosts"]:
        t.add_row(
            h["name"],
            h.get("address", "?"),
            h["namespace"],
            "yes" if h.get("namespace_exists") else "NO",
            str(h.get("sshd_pid") or "-"),
            "yes" if h.get("sshd_alive") else "NO",
        )
    OUT.print(t)
    if s.get("inventory"):
        OUT.print(f"inventory: {s['inventory']}", highlight=False)


@lab.command()
@click.option("--name", default=None, help="The lab to remove (default: lab).")
@click.option("--all", "all_labs", is_flag=True, help="Remove every lab on this machine.")
def down(name: str | None, all_labs: bool) -> None:
    """Remove the lab: its processes, namespaces, links and directory."""
    if all_labs and name:
        raise click.UsageError("give --name or --all, not both")
    names = netns_state.list_labs() if all_labs else [name or "lab"]
    if all_labs and not names:
        OUT.print("no labs")
    for n in names:
        with ERR.status(f"lab down {n}"):
            removed = netns_lab.down(n)
        OUT.print(f"lab {n}: removed" if removed else f"lab {n}: nothing to remove")
