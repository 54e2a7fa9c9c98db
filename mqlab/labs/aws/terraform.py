"""A thin wrapper over the ``terraform`` CLI: ``-chdir``, ``-json`` events, ``-detailed-exitcode``.

(``python-terraform`` is not used: its last release, 2019, sends ``-auto-approve=false``
from ``apply()``, the removed ``-force`` from ``destroy()``, and ``output(name)``
raises KeyError on current Terraform.)

Terraform runs in its own process group, so a Ctrl-C reaches mqlab first; mqlab
then forwards SIGINT, waits for Terraform to save its state, and decides what to
do (``up`` destroys what was created).
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import subprocess
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mqlab.errors import InfraError

LOG = logging.getLogger(__name__)

Event = dict[str, Any]
EventHandler = Callable[[Event], None]
SECRET_ENV = ("AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_SECURITY_TOKEN")


def scrub(text: str, env: Mapping[str, str] | None = None) -> str:
    """Replace any credential value from the environment that shows up in ``text``."""
    env = os.environ if env is None else env
    for name in SECRET_ENV:
        value = env.get(name)
        if value and len(value) >= 8:
            text = text.replace(value, f"<{name} redacted>")
    return text


@dataclass
class Result:
    args: list[str]
    returncode: int
    events: list[Event] = field(default_factory=list)
    stdout: str = ""
    stderr: str = ""

    def diagnostics(self) -> list[str]:
        """Error summaries from ``-json`` diagnostics, else the last stderr lines."""
        out = []
        for e in self.events:
            diag = e.get("diagnostic")
            if e.get("type") == "diagnostic" and diag and diag.get("severity") == "error":
                detail = f": {diag['detail']}" if diag.get("detail") else ""
                out.append(f"{diag.get('summary', '')}{detail}")
        if not out and self.stderr.strip():
            out = self.stderr.strip().splitlines()[-3:]
        return [scrub(" ".join(line.split())) for line in out]


class Terraform:
    """Runs ``terraform -chdir=WORKDIR ...`` with a given environment."""

    def __init__(self, workdir: Path, env: Mapping[str, str], binary: str | None = None):
        self.workdir = workdir
        self.env = dict(env)
        found = binary or os.environ.get("MQLAB_TERRAFORM") or shutil.which("terraform")
        if not found:
            raise InfraError(
                "terraform not found on PATH (install Terraform >= 1.11 or set MQLAB_TERRAFORM)"
            )
        self.binary = found

    def run(
        self,
        args: Sequence[str],
        on_event: EventHandler | None = None,
        ok_codes: tuple[int, ...] = (0,),
    ) -> Result:
        cmd = [self.binary, f"-chdir={self.workdir}", *args]
        LOG.info("running %s", " ".join(cmd[1:]))  # arguments only: never the environment
        json_mode = "-json" in args
        with tempfile.TemporaryFile("w+") as err:
            proc = subprocess.Popen(
                cmd,
                env=self.env,
                stdout=subprocess.PIPE,
                stderr=err,
                stdin=subprocess.DEVNULL,
                text=True,
                start_new_session=True,
            )
            result = self._collect(proc, json_mode, on_event, list(args))
            err.seek(0)
            result.stderr = err.read()
        LOG.debug("terraform %s exited %d", args[0], result.returncode)
        if result.returncode not in ok_codes:
            problems = "; ".join(result.diagnostics()) or f"exit code {result.returncode}"
            raise InfraError(f"terraform {args[0]} failed in {self.workdir}: {problems}")
        return result

    @staticmethod
    def _collect(
        proc: subprocess.Popen[str], json_mode: bool, on_event: EventHandler | None, args: list[str]
    ) -> Result:
        result = Result(args, -1)
        try:
            assert proc.stdout is not None
            lines = []
            for line in proc.stdout:
                lines.append(line)
                if not json_mode:
                    continue
                try:
                    event = json.loads(line)
                except json.JSONDecodeError:
                    continue
                if isinstance(event, dict):
                    result.events.append(event)
                    if on_event is not None:
                        on_event(event)
            result.stdout = "".join(lines)
            result.returncode = proc.wait()
        except BaseException:  # Ctrl-C, or an error in on_event: stop Terraform gracefully
            _interrupt(proc)
            raise
        return result

    def init(self, backend_config: Mapping[str, str], plugin_dir: Path | None) -> Result:
        args = ["init", "-input=false", "-no-color", "-reconfigure"]
        if plugin_dir is not None:
            args.append(f"-plugin-dir={plugin_dir}")
        args += [f"-backend-config={k}={v}" for k, v in backend_config.items()]
        return self.run(args)

    def plan(
        self,
        var_file: Path,
        out: Path | None = None,
        destroy: bool = False,
        on_event: EventHandler | None = None,
    ) -> tuple[bool, Result]:
        """Plan; return (changes pending, result) using ``-detailed-exitcode``."""
        args = ["plan", "-input=false", "-json", "-detailed-exitcode", f"-var-file={var_file}"]
        if destroy:
            args.append("-destroy")
        if out is not None:
            args.append(f"-out={out}")
        res = self.run(args, on_event=on_event, ok_codes=(0, 2))
        return res.returncode == 2, res

    def apply(self, plan_file: Path, on_event: EventHandler | None = None) -> Result:
        return self.run(
            ["apply", "-input=false", "-json", "-auto-approve", str(plan_file)], on_event=on_event
        )

    def destroy(self, var_file: Path, on_event: EventHandler | None = None) -> Result:
        return self.run(
            ["destroy", "-input=false", "-json", "-auto-approve", f"-var-file={var_file}"],
            on_event=on_event,
        )

    def outputs(self) -> dict[str, Any]:
        """All outputs as {name: value} (``terraform output -json``)."""
        res = self.run(["output", "-json", "-no-color"])
        data = json.loads(res.stdout or "{}")
        return {name: entry.get("value") for name, entry in data.items()}

    def state_resources(self) -> list[str]:
        """Addresses of the managed resources in the state (empty when nothing exists)."""
        res = self.run(["state", "list", "-no-color"], ok_codes=(0, 1))
        if res.returncode == 1:
            if "No state file was found" in res.stderr:
                return []
            raise InfraError(f"terraform state list failed: {'; '.join(res.diagnostics())}")
        return [line for line in res.stdout.splitlines() if line and not line.startswith("data.")]


def _interrupt(proc: subprocess.Popen[str]) -> None:
    """Ask Terraform to stop gracefully (it saves state), and wait for it."""
    if proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, signal.SIGINT)
    except ProcessLookupError:
        return
    try:
        proc.wait(timeout=600)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    except KeyboardInterrupt:  # a second Ctrl-C while waiting: still wait, it is saving state
        proc.wait()
