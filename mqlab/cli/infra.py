"""`mqlab infra ...` commands (thin: each parses arguments and calls one function)."""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any, TypeVar

import click
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from mqlab.errors import MqlabError
from mqlab.labs.aws import lifecycle
from mqlab.labs.aws.labs import LabSpec, parse_rfc3339, spec_from_scenarios

F = TypeVar("F", bound=Callable[..., Any])
ERR = Console(stderr=True, log_path=False)
OUT = Console()
if not OUT.is_terminal:
    OUT = Console(width=160)  # tables stay readable when piped or captured


def _one_line_errors(fn: F) -> F:
    """User and environment mistakes: one line on stderr, exit code 2 (130 if interrupted)."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except MqlabError as e:
            click.echo(f"mqlab: error: {e}", err=True)
            raise SystemExit(e.exit_code) from None

    return wrapper  # type: ignore[return-value]


def _spec(scenario: str) -> LabSpec:
    from mqlab.scenario.load import load_scenario

    return spec_from_scenarios(load_scenario(Path(scenario)))


class _RichProgress:
    def __init__(self, progress: Progress):
        self.bar = progress
        self.task = progress.add_task("starting", total=None)

    def phase(self, text: str) -> None:
        self.bar.update(self.task, description=text, completed=0, total=None)

    def total(self, count: int) -> None:
        self.bar.update(self.task, total=count or None)

    def advance(self, address: str) -> None:
        self.bar.update(self.task, advance=1)


@contextmanager
def _progress() -> Iterator[_RichProgress]:
    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
    )
    with Progress(*columns, console=ERR, transient=True) as p:
        yield _RichProgress(p)


@click.group()
def infra() -> None:
    """Terraform-driven lab environments on AWS."""


@infra.command()
@click.argument("scenario", type=click.Path(dir_okay=False))
@_one_line_errors
def plan(scenario: str) -> None:
    """Show what `up` would create for SCENARIO, and its cost per hour."""
    spec = _spec(scenario)
    with _progress() as p:
        summary = lifecycle.plan(spec, p)
    click.echo(
        f"lab {summary.lab_id}: {summary.add} to add, {summary.change} to change, "
        f"{summary.destroy} to destroy"
    )
    click.echo(
        f"{spec.broker_count} brokers ({spec.broker_instance_type}), {spec.sender_count} "
        f"senders + {spec.receiver_count} receivers ({spec.client_instance_type}) "
        f"in {spec.region}: {summary.cost.describe()}"
    )


@infra.command()
@click.argument("scenario", type=click.Path(dir_okay=False))
@_one_line_errors
def up(scenario: str) -> None:
    """Create the lab for SCENARIO (sized to its largest sweep point)."""
    spec = _spec(scenario)
    click.echo(f"lab {spec.lab_id}: estimated {spec.cost().describe()}")
    click.echo("on error or Ctrl-C everything created so far is destroyed again")
    with _progress() as p:
        result = lifecycle.up(spec, p)
    inv = result.inventory
    table = Table(title=f"lab {inv.lab_id} ({inv.region}), expires {inv.expires_at}")
    for col in ("host", "private ip", "public ip", "instance"):
        table.add_column(col)
    for h in inv.hosts:
        table.add_row(h.name, h.private_ip, h.public_ip or "-", h.instance_id)
    OUT.print(table)
    click.echo(f"ssh: ssh -i {inv.ssh_key} {inv.ssh_user}@<public ip>")
    click.echo(f"inventory: {result.lab.inventory_file}")
    click.echo(f"cost: {result.cost.describe()}; stop it with `mqlab infra down {scenario}`")


@infra.command()
@click.argument("target")
@_one_line_errors
def down(target: str) -> None:
    """Destroy the lab of TARGET (a scenario file or a lab id). Always runs destroy."""
    spec = _spec(target) if Path(target).is_file() else None
    lab = lifecycle.find_lab(target, spec)
    with _progress() as p:
        record = lifecycle.down(lab, p)
    click.echo(f"lab {record.lab_id}: destroyed")


@infra.command()
@click.argument("target", required=False)
@click.option("--all", "show_all", is_flag=True, help="Also list destroyed labs.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@_one_line_errors
def status(target: str | None, show_all: bool, as_json: bool) -> None:
    """List live labs, or show the lab of TARGET (scenario file or lab id)."""
    only = None
    if target:
        only = lifecycle.find_lab(target, _spec(target) if Path(target).is_file() else None)
    labs = lifecycle.status(include_destroyed=show_all, only=only)
    if as_json:
        doc = {
            "format_version": 1,
            "labs": [
                {
                    **s.record.__dict__,
                    "path": str(s.path),
                    "resources": s.resources,
                    "inventory": s.inventory.to_json() if s.inventory else None,
                }
                for s in labs
            ],
        }
        click.echo(json.dumps(doc, indent=2))
        return
    if not labs:
        click.echo("no live labs")
        return
    table = Table()
    for col in (
        "lab",
        "state",
        "region",
        "brokers/senders/receivers",
        "resources",
        "expires",
        "$/hour",
    ):
        table.add_column(col)
    for s in labs:
        r = s.record
        counts = "/".join(str(r.counts.get(k, "?")) for k in ("brokers", "senders", "receivers"))
        cost = f"{r.cost_usd_per_hour:.2f}" if r.cost_usd_per_hour is not None else "?"
        table.add_row(
            r.lab_id,
            r.state,
            r.region,
            counts,
            "?" if s.resources is None else str(s.resources),
            r.expires_at,
            cost,
        )
    OUT.print(table)
    if only is not None and labs[0].inventory is not None:
        for h in labs[0].inventory.hosts:
            click.echo(f"{h.name}\t{h.private_ip}\t{h.public_ip or '-'}\t{h.instance_id}")


@infra.command()
@click.option("--dry-run", is_flag=True, help="Only list the expired labs.")
@click.option("--now", "now_text", hidden=True, help="Pretend it is this RFC 3339 UTC time.")
@_one_line_errors
def gc(dry_run: bool, now_text: str | None) -> None:
    """Destroy every lab past its expiry (created + ttl_hours)."""
    now: datetime | None = parse_rfc3339(now_text) if now_text else None
    with _progress() as p:
        outcomes = lifecycle.gc(now=now, dry_run=dry_run, progress=p)
    if not outcomes:
        click.echo("no expired labs")
    for o in outcomes:
        click.echo(f"{o.lab_id} (expired {o.expires_at}): {o.action}")
    if any(o.action.startswith("failed") for o in outcomes):
        raise SystemExit(2)
