"""One state directory per lab: what to build (LabSpec), where (LabDir), and its record.

Layout of ``<labs root>/<lab id>/`` (the root is ``$MQLAB_LABS_DIR`` or ``./.mqlab/labs``)::

    lab.json                 the record: scenario, region, expiry, state, backend, cost
    terraform.tfvars.json    variables written from the scenario
    terraform.tfstate        local backend state (unless the S3 backend is chosen)
    id_ed25519[.pub]         the lab's SSH key pair (private key 0600, never archived)
    inventory.json           the typed host list after ``up``
    terraform/               the modules and root stack this lab was built with
    tf-data/, terraformrc    Terraform's working data and CLI configuration
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
from dataclasses import asdict, dataclass, field, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mqlab.errors import InfraError, ScenarioError
from mqlab.labs.aws.prices import CostEstimate, NodeGroup, estimate

if TYPE_CHECKING:
    from mqlab.scenario.model import Scenario

FORMAT_VERSION = 1
ACCEPTED_VERSIONS = (1,)
PROVIDER = Path("registry.terraform.io/hashicorp/aws")
PLUGIN_DIR_CANDIDATES = (
    Path("/opt/tf-plugins"),
    Path("/usr/local/share/terraform/plugins"),
    Path("/usr/share/terraform/plugins"),
)
LIVE_STATES = ("creating", "up", "failed", "destroying")


def labs_root() -> Path:
    return Path(os.environ.get("MQLAB_LABS_DIR") or Path.cwd() / ".mqlab" / "labs").resolve()


def terraform_source() -> Path:
    """The project's terraform/ folder ($MQLAB_TERRAFORM_DIR overrides)."""
    env = os.environ.get("MQLAB_TERRAFORM_DIR")
    root = Path(env) if env else Path(__file__).resolve().parents[3] / "terraform"
    if not (root / "stacks" / "lab" / "main.tf").is_file():
        raise InfraError(f"{root}: no terraform/stacks/lab here (set MQLAB_TERRAFORM_DIR)")
    return root


def find_plugin_dir() -> Path | None:
    """An on-disk provider mirror ($MQLAB_TF_PLUGIN_DIR, else a known place); None: download."""
    env = os.environ.get("MQLAB_TF_PLUGIN_DIR")
    if env:
        if not (Path(env) / PROVIDER).is_dir():
            raise InfraError(f"MQLAB_TF_PLUGIN_DIR={env} has no {PROVIDER} (an unpacked mirror)")
        return Path(env)
    return next((p for p in PLUGIN_DIR_CANDIDATES if (p / PROVIDER).is_dir()), None)


def utc_now() -> datetime:
    return datetime.now(UTC).replace(microsecond=0)


def rfc3339(t: datetime) -> str:
    return t.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_rfc3339(text: str) -> datetime:
    return datetime.strptime(text, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)


def lab_id_for(name: str, source: Path) -> str:
    """Stable id: the scenario's name plus a hash of its file path (2..40 of [a-z0-9-])."""
    slug = re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")[:30].strip("-") or "lab"
    digest = hashlib.sha256(str(source.resolve()).encode()).hexdigest()[:6]
    return f"{slug}-{digest}"


@dataclass(frozen=True)
class LabSpec:
    """What to build, sized to the largest point of the scenario's sweep."""

    lab_id: str
    scenario_name: str
    source: Path
    broker: str
    region: str
    broker_count: int
    sender_count: int
    receiver_count: int
    broker_instance_type: str
    client_instance_type: str
    availability_zones: int
    operator_cidr: str
    ami_id: str
    flake_rev: str
    ebs_type: str
    ebs_size_gb: int
    placement_group: bool
    ttl_hours: float
    ssh_user: str

    def node_groups(self) -> list[NodeGroup]:
        return [
            NodeGroup("broker", self.broker_count, self.broker_instance_type),
            NodeGroup("sender", self.sender_count, self.client_instance_type),
            NodeGroup("receiver", self.receiver_count, self.client_instance_type),
        ]

    def cost(self) -> CostEstimate:
        return estimate(self.region, self.node_groups(), self.ebs_type, self.ebs_size_gb)

    def tfvars(self, expires_at: str, public_key: str, endpoint: str) -> dict[str, Any]:
        return {
            "format_version": FORMAT_VERSION,
            "lab_id": self.lab_id,
            "region": self.region,
            "aws_endpoint": endpoint,
            "broker": self.broker,
            "broker_count": self.broker_count,
            "broker_instance_type": self.broker_instance_type,
            "client_instance_type": self.client_instance_type,
            "sender_count": self.sender_count,
            "receiver_count": self.receiver_count,
            "availability_zones": self.availability_zones,
            "operator_cidr": self.operator_cidr,
            "ami_id": self.ami_id,
            "flake_rev": self.flake_rev,
            "ebs_type": self.ebs_type,
            "ebs_size_gb": self.ebs_size_gb,
            "placement_group": self.placement_group,
            "expires_at": expires_at,
            "ssh_user": self.ssh_user,
            "ssh_public_key": public_key,
        }


def spec_from_scenarios(scenarios: list[Scenario]) -> LabSpec:
    """One lab for all points of a sweep: as many nodes as the largest point needs."""
    if not scenarios:
        raise InfraError("the scenario expanded to no runs")
    first = scenarios[0]
    for s in scenarios:
        if s.cluster.target != "aws":
            raise ScenarioError(
                s.source,
                "cluster.target",
                f"is {s.cluster.target!r}",
                'set target = "aws" and a [cluster.aws] table for `mqlab infra`',
            )
        if s.cluster.aws != first.cluster.aws:
            raise ScenarioError(
                s.source,
                "cluster.aws",
                "differs between sweep points",
                "sweep only node counts; one lab serves the whole sweep",
            )
    aws = first.cluster.aws
    assert aws is not None and aws.operator_cidr  # validate_aws ran in load_scenario
    return LabSpec(
        lab_id=lab_id_for(first.name, first.source),
        scenario_name=first.name,
        source=first.source.resolve(),
        broker=first.broker,
        region=aws.region,
        broker_count=max(s.cluster.nodes for s in scenarios),
        sender_count=max(s.clients.sender_nodes for s in scenarios),
        receiver_count=max(s.clients.receiver_nodes for s in scenarios),
        broker_instance_type=aws.broker_instance_type,
        client_instance_type=aws.client_instance_type,
        availability_zones=aws.availability_zones,
        operator_cidr=aws.operator_cidr,
        ami_id=aws.ami_id,
        flake_rev=aws.flake_rev,
        ebs_type=aws.ebs_type,
        ebs_size_gb=aws.ebs_size_gb,
        placement_group=aws.placement_group,
        ttl_hours=aws.ttl_hours,
        ssh_user=aws.ssh_user,
    )


@dataclass(frozen=True)
class Backend:
    kind: str = "local"  # local | s3
    bucket: str = ""
    key: str = ""
    region: str = ""

    @staticmethod
    def from_env(lab_id: str, lab_region: str) -> Backend:
        """``$MQLAB_TF_BACKEND``: empty/``local``, or ``s3://BUCKET/PREFIX`` (state in S3)."""
        url = os.environ.get("MQLAB_TF_BACKEND", "").strip()
        if url in ("", "local"):
            return Backend()
        m = re.fullmatch(r"s3://([a-z0-9][a-z0-9.-]{1,61}[a-z0-9])(/.*)?", url)
        if not m:
            raise InfraError(f"MQLAB_TF_BACKEND={url!r}: expected 'local' or s3://BUCKET/PREFIX")
        prefix = (m.group(2) or "").strip("/")
        key = f"{prefix}/{lab_id}/terraform.tfstate" if prefix else f"{lab_id}/terraform.tfstate"
        region = os.environ.get("MQLAB_TF_BACKEND_REGION") or lab_region
        return Backend("s3", m.group(1), key, region)

    def init_config(self, lab_dir: Path) -> dict[str, str]:
        if self.kind == "local":
            return {"path": str(lab_dir / "terraform.tfstate")}
        return {"bucket": self.bucket, "key": self.key, "region": self.region}


@dataclass
class LabRecord:
    lab_id: str
    scenario: str  # path of the scenario file
    scenario_name: str
    broker: str
    region: str
    created_at: str
    expires_at: str
    state: str  # creating | up | failed | destroying | destroyed
    cost_usd_per_hour: float | None = None
    backend: dict[str, str] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)
    format_version: int = FORMAT_VERSION

    def expired(self, now: datetime) -> bool:
        return parse_rfc3339(self.expires_at) <= now


class LabDir:
    """The files of one lab."""

    def __init__(self, path: Path):
        self.path = path

    @classmethod
    def for_id(cls, lab_id: str) -> LabDir:
        return cls(labs_root() / lab_id)

    record_file = property(lambda self: self.path / "lab.json")
    tfvars_file = property(lambda self: self.path / "terraform.tfvars.json")
    inventory_file = property(lambda self: self.path / "inventory.json")
    plan_file = property(lambda self: self.path / "lab.tfplan")
    stack_dir = property(lambda self: self.path / "terraform" / "stacks" / "lab")

    def exists(self) -> bool:
        return self.record_file.is_file()

    def load(self) -> LabRecord:
        try:
            data = json.loads(self.record_file.read_text())
        except (OSError, json.JSONDecodeError) as e:
            raise InfraError(f"{self.record_file}: cannot read lab record ({e})") from None
        if data.get("format_version") not in ACCEPTED_VERSIONS:
            raise InfraError(
                f"{self.record_file}: unsupported format_version "
                f"{data.get('format_version')!r} (this mqlab reads {ACCEPTED_VERSIONS})"
            )
        return LabRecord(**data)

    def save(self, record: LabRecord) -> None:
        tmp = self.record_file.with_suffix(".tmp")
        tmp.write_text(json.dumps(asdict(record), indent=2) + "\n")
        tmp.replace(self.record_file)

    def update(self, **changes: Any) -> LabRecord:
        record = replace(self.load(), **changes)
        self.save(record)
        return record

    def prepare(self, source: Path, backend: Backend) -> None:
        """Create the directory and (re)copy the Terraform configuration into it."""
        self.path.mkdir(parents=True, exist_ok=True)
        os.chmod(self.path, 0o700)
        dest = self.path / "terraform"
        for part in ("modules", "stacks/lab"):
            target = dest / part
            if target.exists():
                shutil.rmtree(target)
            shutil.copytree(
                source / part,
                target,
                ignore=shutil.ignore_patterns(".terraform", "*.tfstate*", "tests"),
            )
        override = self.stack_dir / "backend_override.tf"
        if backend.kind == "s3":
            override.write_text(
                f"# written by mqlab (format_version {FORMAT_VERSION})\n"
                'terraform {\n  backend "s3" {}\n}\n'
            )
        (self.path / "terraformrc").write_text(
            f"# written by mqlab (format_version {FORMAT_VERSION})\ndisable_checkpoint = true\n"
        )

    def write_tfvars(self, tfvars: dict[str, Any]) -> None:
        self.tfvars_file.write_text(json.dumps(tfvars, indent=2) + "\n")

    def terraform_env(self) -> dict[str, str]:
        """The caller's environment (AWS credentials come from the standard chain) plus
        Terraform's per-lab working data; nothing is ever read from or written to $HOME."""
        env = dict(os.environ)
        env.update(
            {
                "TF_DATA_DIR": str(self.path / "tf-data"),
                "TF_CLI_CONFIG_FILE": str(self.path / "terraformrc"),
                "TF_IN_AUTOMATION": "1",
                "CHECKPOINT_DISABLE": "1",
            }
        )
        env.pop("TF_LOG", None)  # provider debug logs would echo request signatures
        return env


def new_record(spec: LabSpec, backend: Backend, now: datetime) -> LabRecord:
    return LabRecord(
        lab_id=spec.lab_id,
        scenario=str(spec.source),
        scenario_name=spec.scenario_name,
        broker=spec.broker,
        region=spec.region,
        created_at=rfc3339(now),
        expires_at=rfc3339(now + timedelta(hours=spec.ttl_hours)),
        state="creating",
        cost_usd_per_hour=spec.cost().usd_per_hour,
        backend=asdict(backend),
        counts={
            "brokers": spec.broker_count,
            "senders": spec.sender_count,
            "receivers": spec.receiver_count,
        },
    )


def all_labs() -> list[LabDir]:
    root = labs_root()
    if not root.is_dir():
        return []
    return [LabDir(p) for p in sorted(root.iterdir()) if (p / "lab.json").is_file()]
