"""plan / up / down / status / gc of labs (the CLI calls one function each).

Safety: if ``up`` fails or is interrupted (Ctrl-C, SIGTERM), everything it created
is destroyed before returning, and the error says whether that worked.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, Protocol

from mqlab.errors import InfraError
from mqlab.labs.aws import inventory as inv
from mqlab.labs.aws.keys import PRIVATE_NAME, PUBLIC_NAME, ensure_key_pair
from mqlab.labs.aws.labs import (
    LIVE_STATES,
    Backend,
    LabDir,
    LabRecord,
    LabSpec,
    all_labs,
    find_plugin_dir,
    new_record,
    rfc3339,
    terraform_source,
    utc_now,
)
from mqlab.labs.aws.prices import CostEstimate
from mqlab.labs.aws.terraform import Event, Terraform
from mqlab.signals import sigterm_as_interrupt

LOG = logging.getLogger(__name__)


class Progress(Protocol):
    """How long work reports itself (the CLI draws it)."""

    def phase(self, text: str) -> None: ...
    def total(self, count: int) -> None: ...
    def advance(self, address: str) -> None: ...


class _Quiet:
    def phase(self, text: str) -> None:
        LOG.info("%s", text)

    def total(self, count: int) -> None:
        pass

    def advance(self, address: str) -> None:
        pass


class LabInterrupted(InfraError):
    exit_code = 130


@dataclass(frozen=True)
class PlanSummary:
    lab_id: str
    add: int
    change: int
    destroy: int
    cost: CostEstimate


@dataclass(frozen=True)
class UpResult:
    lab: LabDir
    inventory: inv.Inventory
    cost: CostEstimate


@dataclass(frozen=True)
class LabStatus:
    record: LabRecord
    path: Path
    resources: int | None  # managed resources in the state; None if it could not be read
    inventory: inv.Inventory | None


def _events(progress: Progress) -> Any:
    def on_event(e: Event) -> None:
        kind = e.get("type")
        if kind == "change_summary":
            ch = e.get("changes", {})
            progress.total(
                int(ch.get("add", 0)) + int(ch.get("change", 0)) + int(ch.get("remove", 0))
            )
        elif kind in ("apply_complete", "apply_errored"):
            progress.advance(e.get("hook", {}).get("resource", {}).get("addr", "?"))

    return on_event


def _terraform(lab: LabDir, record: LabRecord) -> Terraform:
    tf = Terraform(lab.stack_dir, lab.terraform_env())
    tf.init(Backend(**record.backend).init_config(lab.path), find_plugin_dir())
    return tf


def _prepare(spec: LabSpec, for_up: bool) -> tuple[LabDir, LabRecord]:
    """Write the lab's directory, key pair and variables; ``up`` (re)starts the expiry clock."""
    lab = LabDir.for_id(spec.lab_id)
    backend = Backend.from_env(spec.lab_id, spec.region)
    record = new_record(spec, backend, utc_now())
    if lab.exists():
        old = lab.load()
        record.created_at = old.created_at
        if not for_up:  # plan changes nothing that is recorded
            record = old
    if not for_up and not lab.exists():
        record.state = "planned"
    lab.prepare(terraform_source(), Backend(**record.backend))
    lab.save(record)
    _, public_key = ensure_key_pair(lab.path, f"mqlab-{spec.lab_id}")
    endpoint = os.environ.get("MQLAB_AWS_ENDPOINT", "")
    lab.write_tfvars(spec.tfvars(record.expires_at, public_key, endpoint))
    return lab, record


def plan(spec: LabSpec, progress: Progress | None = None) -> PlanSummary:
    """What ``up`` would do (also checks credentials and the AMI lookup)."""
    progress = progress or _Quiet()
    lab, record = _prepare(spec, for_up=False)
    progress.phase("terraform init")
    tf = _terraform(lab, record)
    progress.phase("terraform plan")
    _, res = tf.plan(lab.tfvars_file, out=lab.plan_file)
    changes: dict[str, Any] = {}
    for e in res.events:
        if e.get("type") == "change_summary":
            changes = e.get("changes", {})
    return PlanSummary(
        spec.lab_id,
        int(changes.get("add", 0)),
        int(changes.get("change", 0)),
        int(changes.get("remove", 0)),
        spec.cost(),
    )


def up(spec: LabSpec, progress: Progress | None = None) -> UpResult:
    """Create (or update) the lab; on any failure destroy what was created."""
    progress = progress or _Quiet()
    lab, record = _prepare(spec, for_up=True)
    with sigterm_as_interrupt():
        try:
            progress.phase("terraform init")
            tf = _terraform(lab, record)
            progress.phase("terraform plan")
            tf.plan(lab.tfvars_file, out=lab.plan_file, on_event=_events(progress))
            progress.phase(f"creating lab {spec.lab_id}")
            tf.apply(lab.plan_file, on_event=_events(progress))
            outputs = tf.outputs()
            inventory = inv.from_output(outputs["inventory"], lab.path / PRIVATE_NAME)
        except (Exception, KeyboardInterrupt) as e:
            interrupted = isinstance(e, KeyboardInterrupt)
            lab.update(state="failed")
            progress.phase("cleaning up: destroying what was created")
            cleanup = _destroy_after_failure(lab, progress)
            what = "interrupted" if interrupted else f"failed: {e}"
            if not isinstance(e, InfraError | KeyboardInterrupt):
                LOG.exception("unexpected error during up")
            cls = LabInterrupted if interrupted else InfraError
            raise cls(f"infra up {what}; {cleanup}") from None
    # the lab's price per hour travels with its hosts: runs state their cost from it
    inventory = dataclasses.replace(
        inventory, kind="aws", price_per_hour_usd=spec.cost().usd_per_hour
    )
    inv.save(inventory, lab.inventory_file)
    lab.update(state="up")
    lab.plan_file.unlink(missing_ok=True)
    return UpResult(lab, inventory, spec.cost())


def _nothing_created(lab: LabDir) -> bool:
    """True when the local state shows no managed resource (so there is nothing to undo)."""
    record = lab.load()
    if record.backend.get("kind", "local") != "local":
        return False
    state_file = lab.path / "terraform.tfstate"
    if not state_file.is_file():
        return True
    try:
        resources = json.loads(state_file.read_text()).get("resources", [])
    except (OSError, json.JSONDecodeError):
        return False
    return not any(r.get("mode") == "managed" for r in resources)


def _destroy_after_failure(lab: LabDir, progress: Progress) -> str:
    if _nothing_created(lab):
        lab.update(state="destroyed")
        return "nothing had been created"
    try:
        _destroy(lab, progress)
    except (Exception, KeyboardInterrupt) as d:
        return (
            f"could NOT destroy what was created ({d}); run `mqlab infra down "
            f"{lab.path.name}` or remove resources tagged mqlab:lab={lab.path.name}"
        )
    return "destroyed everything that had been created"


def _destroy(lab: LabDir, progress: Progress) -> None:
    record = lab.update(state="destroying")
    tf = _terraform(lab, record)
    progress.phase(f"destroying lab {record.lab_id}")
    tf.destroy(lab.tfvars_file, on_event=_events(progress))
    left = tf.state_resources()
    if left:
        lab.update(state="failed")
        raise InfraError(f"{len(left)} resources remain after destroy: {', '.join(left[:5])}")
    lab.update(state="destroyed")
    (lab.path / PRIVATE_NAME).unlink(missing_ok=True)
    (lab.path / PUBLIC_NAME).unlink(missing_ok=True)
    lab.inventory_file.unlink(missing_ok=True)
    lab.plan_file.unlink(missing_ok=True)


def find_lab(target: str, spec: LabSpec | None) -> LabDir:
    """The lab of a scenario (spec given) or named by its id."""
    lab = LabDir.for_id(spec.lab_id if spec else target)
    if not lab.exists():
        known = ", ".join(lab.path.name for lab in all_labs()) or "none"
        raise InfraError(f"no lab {lab.path.name!r} under {lab.path.parent} (labs: {known})")
    return lab


def down(lab: LabDir, progress: Progress | None = None) -> LabRecord:
    """Destroy the lab, whatever state mqlab believes it is in."""
    _destroy(lab, progress or _Quiet())
    return lab.load()


def status(include_destroyed: bool = False, only: LabDir | None = None) -> list[LabStatus]:
    """Labs known in the labs directory, with their resource count from the state."""
    out = []
    for lab in [only] if only else all_labs():
        record = lab.load()
        if record.state not in LIVE_STATES and not include_destroyed and only is None:
            continue
        resources: int | None = None
        if record.state != "destroyed" and record.state != "planned":
            try:
                resources = len(_terraform(lab, record).state_resources())
            except InfraError as e:
                LOG.warning("lab %s: cannot read state: %s", record.lab_id, e)
        else:
            resources = 0
        inventory = None
        if lab.inventory_file.is_file():
            inventory = inv.load(lab.inventory_file, lab.path / PRIVATE_NAME)
        out.append(LabStatus(record, lab.path, resources, inventory))
    return out


@dataclass(frozen=True)
class GcOutcome:
    lab_id: str
    expires_at: str
    action: str  # destroyed | would destroy | failed: ...


def gc(
    now: datetime | None = None, dry_run: bool = False, progress: Progress | None = None
) -> list[GcOutcome]:
    """Destroy every live lab whose expiry (created + ttl_hours) has passed."""
    now = now or utc_now()
    progress = progress or _Quiet()
    out = []
    for lab in all_labs():
        record = lab.load()
        if record.state not in LIVE_STATES or not record.expired(now):
            continue
        if dry_run:
            out.append(GcOutcome(record.lab_id, record.expires_at, "would destroy"))
            continue
        try:
            _destroy(lab, progress)
            out.append(GcOutcome(record.lab_id, record.expires_at, "destroyed"))
        except InfraError as e:
            out.append(GcOutcome(record.lab_id, record.expires_at, f"failed: {e}"))
    LOG.info("gc at %s: %d expired labs", rfc3339(now), len(out))
    return out


def lab_inventory(spec: LabSpec) -> inv.Inventory:
    """The typed host list of the scenario's live lab (for the fleet), with its SSH key path."""
    lab = find_lab(spec.lab_id, spec)
    record = lab.load()
    if record.state != "up" or not lab.inventory_file.is_file():
        raise InfraError(f"lab {record.lab_id} is {record.state}, not up (run `mqlab infra up`)")
    return inv.load(lab.inventory_file, lab.path / PRIVATE_NAME)
