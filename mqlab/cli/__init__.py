"""The `mqlab` command line. Each command parses arguments and calls one function."""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from mqlab.cli import checks as checks  # registers the scenario checks from above
from mqlab.errors import MqlabError

console = Console(stderr=True, log_path=False)  # log lines say what happens, not where
PIPE_WIDTH = 280  # stdout's width when it is not a terminal (a pipe, a file, captured):
# `mqlab ls` of the seeds (run ids of 120 characters) keeps every column
out = Console()
if not out.is_terminal:
    out = Console(width=PIPE_WIDTH)  # tables stay readable when piped or captured


class _Group(click.Group):
    """Turns every MqlabError into one line on stderr and exit code 2."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except MqlabError as e:
            click.echo(f"mqlab: error: {e}", err=True)
            sys.exit(e.exit_code)


@click.group(cls=_Group)
@click.version_option(package_name="mqlab")
@click.option("-v", "--verbose", count=True, help="More logging (-v info, -vv debug).")
def main(verbose: int) -> None:
    """mqlab: benchmark persistent, replicated message queues, reproducibly."""
    level = logging.WARNING - 10 * min(verbose, 2)
    logging.basicConfig(level=level, format="%(levelname)s %(name)s: %(message)s")
    for name in CLIENT_LIBRARIES:  # their reconnect attempts during a fault are not errors;
        # mqlab reports a connection that stays lost (-vv shows theirs)
        logging.getLogger(name).setLevel(logging.DEBUG if verbose >= 2 else logging.CRITICAL)


#: broker client libraries that log each failed connect attempt at ERROR
CLIENT_LIBRARIES = ("pika", "nats", "redis", "kafka", "confluent_kafka", "botocore")


RESULTS_OPTION = click.option(
    "--results",
    "results_dir",
    type=click.Path(path_type=Path),
    default=Path("results"),
    show_default=True,
    help="Directory holding run archives.",
)


# -- run ----------------------------------------------------------------------
class _CliObserver:
    def __init__(self) -> None:
        self.progress = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            TextColumn("{task.fields[counts]}"),
            TimeElapsedColumn(),
            console=console,
            transient=True,
        )
        self.task: Any = None

    def phase(self, text: str) -> None:
        console.log(text)

    def progress_update(
        self, elapsed_s: float, totals: dict[str, int], expected: int | None
    ) -> None:
        if self.task is None:
            self.progress.start()
            self.task = self.progress.add_task("measuring", total=expected, counts="")
        counts = f"sent {totals.get('confirmed', 0):,}  received {totals.get('received', 0):,}" + (
            f"  failed {totals['failed']:,}" if totals.get("failed") else ""
        )
        self.progress.update(self.task, completed=totals.get("received", 0), counts=counts)

    def finished(self, result: Any) -> None:
        if self.task is not None:
            self.progress.stop()
            self.task = None
        console.log(f"archived {result.run_dir} ({result.status}: {result.end_reason})")


def _observer() -> Any:
    from mqlab.run.context import Observer

    class CliObserver(Observer):
        def __init__(self) -> None:
            self.ui = _CliObserver()

        def phase(self, text: str) -> None:
            self.ui.phase(text)

        def progress(self, elapsed_s: float, totals: dict[str, int], expected: int | None) -> None:
            self.ui.progress_update(elapsed_s, totals, expected)

        def finished(self, result: Any) -> None:
            self.ui.finished(result)

    return CliObserver()


MQPERF_COLUMNS = (
    ("run", "Run"),
    ("threads", "Threads"),
    ("processes", "Processes"),
    ("sender_nodes", "Sender nodes"),
    ("receiver_nodes", "Receiver nodes"),
    ("send", "Send msgs/s"),
    ("receive", "Receive msgs/s"),
    ("proc_p95", "Processing p95 (ms)"),
    ("send_p95", "Send p95 (ms)"),
    ("lost", "Lost"),
    ("undrained", "Undrained"),
    ("duplicated", "Duplicated"),
    ("marks", "Marks"),  # client-bound, receivers behind (mqlab.analysis.saturation)
    ("status", "Status"),
)


COST_COLUMNS = (("cost", "Cost $"), ("cost_per_m", "$ / M msgs"))  # runs on a priced lab


def mqperf_columns(rows: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """(key, title) of the `run` table's columns: the cost columns only when a run had a
    lab with a price, the marks only when a run has one."""
    columns = [c for c in MQPERF_COLUMNS if c[0] != "marks" or any(r.get("marks") for r in rows)]
    if any(r.get("cost") for r in rows):
        columns[-1:-1] = COST_COLUMNS  # before the status
    return columns


def mqperf_table(rows: list[dict[str, Any]]) -> Table:
    """The `run` table (:func:`mqperf_columns`). The run's name and its status are never
    cut or wrapped: when the table is wider than the console (a pipe, 160 columns), the
    figures' headings fold onto more lines instead."""
    columns = mqperf_columns(rows)
    t = Table(title="mqlab results (mqperf-style)")
    for key, col in columns:
        if key in ("run", "status"):
            widest = max([len(col), *(len(str(r.get(key, ""))) for r in rows)])
            t.add_column(col, justify="left", no_wrap=True, min_width=widest)
        else:
            t.add_column(col, justify="right")
    for r in rows:
        t.add_row(*[str(r.get(key, "")) for key, _ in columns])
    return t


def print_table(console: Console, table: Table) -> None:
    """Print ``table``: on a terminal fitted to its width; on a console that is not a
    terminal (a pipe, a file, captured output) at the table's full width, so no run name or
    figure is cut however many columns the table has."""
    if console.is_terminal:
        console.print(table)
        return
    wide = console.options.update_width(10_000)
    width = console.width
    console.width = max(width, console.measure(table, options=wide).maximum)
    try:
        console.print(table)
    finally:
        console.width = width


def mqperf_row(
    scenario: dict[str, Any],
    summary: dict[str, Any],
    run: str,
    status: str,
    processes: str | None = None,
) -> dict[str, Any]:
    """One row of the `run` table from a run's summary.json (format_version 2); a figure
    the summary could not compute shows as "unknown". Threads are per client node (the
    scenario's: its senders and receivers, whatever its processes); ``processes``: the
    worker processes each client node spread them over, as the run's ``runs`` row counts
    them (``cells.processes_label``); without it, the scenario's processes_per_node,
    else 1 (an archive from before nodes ran several processes)."""
    from mqlab.analysis.saturation import marks
    from mqlab.report.unknown import show

    c = scenario["clients"]
    if processes is None:
        processes = str(c.get("processes_per_node", 1))
    th = (
        str(c["sender_threads"])
        if c["sender_threads"] == c["receiver_threads"]
        else f"{c['sender_threads']}/{c['receiver_threads']}"
    )
    lat = summary["latency_us"]
    d = summary["delivery"]
    priced = (summary.get("lab") or {}).get("price_per_hour_usd") is not None
    return {
        "run": run,
        "threads": th,
        "processes": processes,
        "sender_nodes": c["sender_nodes"],
        "receiver_nodes": c["receiver_nodes"],
        "send": f"{summary['throughput']['send_msgs_per_s']:,.0f}",
        "receive": f"{summary['throughput']['receive_msgs_per_s']:,.0f}",
        "proc_p95": f"{lat['processing_us']['p95'] / 1000:,.1f}",
        "send_p95": f"{lat['send_call_us']['p95'] / 1000:,.1f}",
        "lost": show(d["lost"]),
        "undrained": show(d["undrained"]),
        "duplicated": show(d["duplicated"]),
        "marks": ", ".join(marks(summary.get("saturation"), summary.get("stand_in"))),
        # empty for a lab without a price per hour
        "cost": show(summary.get("cost_usd"), ",.4f") if priced else "",
        "cost_per_m": show(summary.get("cost_per_million_delivered_usd"), ",.4f") if priced else "",
        "status": status,
    }


def mark_notes(summary: dict[str, Any], run: str) -> list[str]:
    """One line per mark of the run (client-bound, receivers behind), with why: its
    figures are not the broker's."""
    sat = summary.get("saturation") or {}
    out = []
    if summary.get("stand_in"):
        out.append(
            f"{run}: stand-in: {summary['stand_in']} served, not the real system; never "
            "quote these figures as its."
        )
    if sat.get("client_bound"):
        why = "; ".join(sat.get("client_bound_why") or [])
        out.append(f"{run}: client-bound: {why}. The load generator's limit, not the broker's.")
    if sat.get("receivers_behind"):
        out.append(
            f"{run}: receivers behind: {sat.get('receivers_behind_why')}. Processing latency "
            "is mostly queueing."
        )
    return out


def failure_notes(summary: dict[str, Any], run: str) -> list[str]:
    """One line per requirement the run failed (its status is "failed")."""
    return [f"{run}: failed: {text}." for text in summary.get("failures") or []]


def unknown_notes(summary: dict[str, Any], run: str) -> list[str]:
    """One line per delivery figure of the run table that is unknown, with the reason."""
    from mqlab.report.unknown import reasons

    why = reasons(summary)
    return [
        f"{run}: {k} unknown: {why.get(k, 'not in the summary')}"
        for k in ("lost", "undrained", "duplicated")
        if summary["delivery"].get(k) is None
    ]


@main.command()
@click.argument("scenarios", nargs=-1, required=True, type=click.Path(path_type=Path))
@RESULTS_OPTION
def run(scenarios: tuple[Path, ...], results_dir: Path) -> None:
    """Run SCENARIO files (every sweep point) and archive each run under --results."""
    from mqlab.run.sweep import execute_files
    from mqlab.scenario.load import to_toml  # noqa: F401  (import check before any work)

    results = execute_files(list(scenarios), results_dir, _observer())
    rows, notes = [], []
    for r in results:
        import tomllib

        from mqlab.analysis.catalog import read_run_table
        from mqlab.report.cells import processes_label, queues_note

        sc = tomllib.loads((r.run_dir / "scenario.toml").read_text())
        runs_row = read_run_table(r.run_dir, "runs").to_pylist()[0]
        procs = processes_label(runs_row)
        rows.append(mqperf_row(sc, r.summary, r.scenario.label, r.status, procs))
        if queues := queues_note(runs_row):
            notes.append(f"{r.scenario.label}: {queues}")
        notes += failure_notes(r.summary, r.scenario.label)
        notes += unknown_notes(r.summary, r.scenario.label)
        notes += mark_notes(r.summary, r.scenario.label)
    print_table(out, mqperf_table(rows))
    for line in notes:
        out.print(line, highlight=False)
    if any(r.status != "complete" for r in results):
        sys.exit(1)


@main.command()
@click.argument("scenarios", nargs=-1, required=True, type=click.Path(path_type=Path))
def validate(scenarios: tuple[Path, ...]) -> None:
    """Check SCENARIO files without running them; list the runs each expands into."""
    from mqlab.scenario.load import load_scenario

    for path in scenarios:
        points = load_scenario(path)
        out.print(f"{path}: ok, {len(points)} run(s)")
        for s in points:
            out.print(f"  {s.name}_{s.label}")


# -- cluster ------------------------------------------------------------------
@main.group()
def cluster() -> None:
    """Local clusters on 127.0.0.1 (state under $MQLAB_STATE_DIR, default ./.mqlab)."""


@cluster.command("up")
@click.argument("broker")
@click.option("--nodes", type=click.IntRange(1, 15), default=None, help="Nodes (default 3).")
@click.option(
    "--profile",
    default=None,
    help="Start the servers as this profile needs (name or path; RocketMQ's layouts), "
    "for runs of that profile.",
)
def cluster_up(broker: str, nodes: int | None, profile: str | None) -> None:
    """Start a local BROKER cluster and leave it running for later runs."""
    from mqlab.brokers import local

    server: dict[str, Any] = {}
    if profile is not None:
        from mqlab.scenario.load import find_profile, load_profile

        path = find_profile(profile, Path.cwd() / "scenarios" / "cluster-up.toml")
        p = load_profile(path)
        if p.broker != broker:
            raise MqlabError(f"{path}: profile {p.name} is for {p.broker}, not {broker}")
        server = local.cluster_class(broker).server_config(p.settings)
    with console.status(f"starting {broker}") as st:
        c = local.up(broker, nodes, progress=lambda m: st.update(m), server=server)
    out.print(f"{broker}: {c.nodes} nodes up")
    out.print(json.dumps(c.endpoints().to_json(), indent=1))


@cluster.command("status")
@click.argument("broker")
def cluster_status(broker: str) -> None:
    """Show whether the local BROKER cluster is up and healthy (exit 1 if not up)."""
    from mqlab.brokers import local

    info = local.status(broker)
    out.print(json.dumps(info, indent=1))
    if not info.get("up"):
        sys.exit(1)


@cluster.command("down")
@click.argument("broker")
def cluster_down(broker: str) -> None:
    """Stop the local BROKER cluster and remove its data."""
    from mqlab.brokers import local

    if local.down(broker):
        out.print(f"{broker}: stopped")
    else:
        out.print(f"{broker}: no local cluster recorded")


# -- ls -----------------------------------------------------------------------
@main.command("ls")
@RESULTS_OPTION
@click.option("--broker", default=None, help="Only runs of this broker.")
@click.option("--scenario", "scenario_name", default=None, help="Only runs of this scenario name.")
@click.option("--since", default=None, help="Only runs started at or after this date (YYYY-MM-DD).")
@click.option("--until", default=None, help="Only runs started before this date (YYYY-MM-DD).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON lines.")
def ls(
    results_dir: Path,
    broker: str | None,
    scenario_name: str | None,
    since: str | None,
    until: str | None,
    as_json: bool,
) -> None:
    """List archived runs (Lost: "unknown" where the summary could not tell, "–" where
    the run has no summary)."""
    from mqlab.report import listing

    runs = listing.filter_runs(
        listing.list_runs(results_dir),
        broker=broker,
        scenario=scenario_name,
        since=since,
        until=until,
    )
    if as_json:
        for r in runs:
            out.print_json(json.dumps(listing.row(r)))
        return
    columns, rows = listing.table([listing.row(r) for r in runs])
    t = Table()
    for col in columns:
        # a run id stays one word to copy, a mark whole
        t.add_column(col, no_wrap=col in ("Run", "Marks"))
    for cells in rows:
        t.add_row(*cells)
    out.print(t)
    hint = listing.fix_hint(runs)
    if hint:
        console.print(f"note: {hint}", highlight=False, markup=False)


def _register() -> None:
    from mqlab.cli.data import DATA_COMMANDS
    from mqlab.cli.fleet import lab
    from mqlab.cli.images import images
    from mqlab.cli.infra import infra

    main.add_command(infra)
    main.add_command(images)
    main.add_command(lab)
    for cmd in DATA_COMMANDS:
        main.add_command(cmd)


_register()
