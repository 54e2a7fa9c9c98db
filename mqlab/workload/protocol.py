"""The worker protocol: what the coordinator and a worker process say to each other.

Commands go to the worker's stdin, one a line (:func:`command_line`,
:func:`parse_command`): ``go MS`` is the common start of every sender (sent once all
workers are ready; MS: the coordinator's wall clock at that start), ``measure MS`` the
measured period's start, ``receivers-stop`` ends the receivers' drain, ``stop`` ends the
worker now, gracefully. Events come back on its stdout as JSON lines with an ``event``
key (:func:`event_line`, :func:`parse_event`): ``started`` (pid, interpreter prefix,
where mqlab was imported from), ``ready`` (senders: ``send_path``; receivers:
``receive_path``), ``measuring`` (a ``measure`` taken), ``progress`` (totals, twice a
second), ``done`` (exit code, totals).

Both sides import this module and nothing else defines the wire; it imports nothing of
mqlab.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, TypeAlias


@dataclass(frozen=True)
class Go:
    """Senders: start sending now."""

    start_ms: int | None = None


@dataclass(frozen=True)
class Measure:
    """The measured period starts at ``at_ms`` (wall clock): close an interval there."""

    at_ms: int


@dataclass(frozen=True)
class ReceiversStop:
    """Receivers: the drain is over, stop receiving."""


@dataclass(frozen=True)
class Stop:
    """Stop now, gracefully (what was recorded is written)."""


Command: TypeAlias = Go | Measure | ReceiversStop | Stop


def command_line(cmd: Command) -> str:
    """The line a command is sent as (without its newline)."""
    if isinstance(cmd, Go):
        return "go" if cmd.start_ms is None else f"go {cmd.start_ms}"
    if isinstance(cmd, Measure):
        return f"measure {cmd.at_ms}"
    if isinstance(cmd, ReceiversStop):
        return "receivers-stop"
    return "stop"


def parse_command(line: str) -> Command | None:
    """The command a line says; None for an empty or unknown line (ignored)."""
    words = line.split()
    if not words:
        return None
    verb, args = words[0], words[1:]
    if verb == "go":
        return Go(int(args[0]) if len(args) == 1 and args[0].isdigit() else None)
    if verb == "measure" and len(args) == 1 and args[0].isdigit():
        return Measure(int(args[0]))
    if verb == "receivers-stop":
        return ReceiversStop()
    if verb == "stop":
        return Stop()
    return None


@dataclass(frozen=True)
class Started:
    """The process runs (before its spec is read)."""

    pid: int
    prefix: str  # the interpreter's sys.prefix
    mqlab: str  # the folder mqlab was imported from


@dataclass(frozen=True)
class Ready:
    """Every thread is connected; senders wait for ``go``."""

    send_path: str | None = None  # senders: how they send (WorkerRecord.send_path)
    receive_path: str | None = None  # receivers: how they receive (WorkerRecord.receive_path)


@dataclass(frozen=True)
class Measuring:
    """``measure AT_MS`` taken: an interval begins at ``at_ms`` (or began when it was
    told, if that was later), so nothing received from then on falls before it."""

    at_ms: int


@dataclass(frozen=True)
class Progress:
    totals: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class Done:
    exit_code: int
    totals: dict[str, int] = field(default_factory=dict)


Event: TypeAlias = Started | Ready | Measuring | Progress | Done
_KINDS: dict[str, type[Event]] = {
    "started": Started,
    "ready": Ready,
    "measuring": Measuring,
    "progress": Progress,
    "done": Done,
}
_NAMES = {cls: name for name, cls in _KINDS.items()}


def event_line(ev: Event) -> str:
    """The JSON line an event is sent as (without its newline)."""
    fields: dict[str, Any] = dict(vars(ev))
    if isinstance(ev, Ready):
        for name in ("send_path", "receive_path"):
            if fields[name] is None:
                del fields[name]
    return json.dumps({"event": _NAMES[type(ev)], **fields})


def parse_event(line: str) -> Event | None:
    """The event a line says; None for a line that is none (logged by the caller)."""
    try:
        doc = json.loads(line)
    except ValueError:
        return None
    if not isinstance(doc, dict):
        return None
    kind = doc.get("event")
    if kind == "started":
        return Started(
            int(doc.get("pid") or 0), str(doc.get("prefix") or ""), str(doc.get("mqlab") or "")
        )
    if kind == "ready":
        send, receive = doc.get("send_path"), doc.get("receive_path")
        return Ready(str(send) if send else None, str(receive) if receive else None)
    if kind == "measuring":
        at = doc.get("at_ms")
        return Measuring(at) if isinstance(at, int) else None
    totals = {str(k): int(v) for k, v in (doc.get("totals") or {}).items()}
    if kind == "progress":
        return Progress(totals)
    if kind == "done":
        return Done(int(doc.get("exit_code") or 0), totals)
    return None
