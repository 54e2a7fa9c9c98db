"""Checks a scenario's ``[cluster.aws]`` section before Terraform ever runs.

``validate_aws`` raises ``ScenarioError(file, "cluster.aws.<field>", problem, fix)``
so the CLI prints one line naming the field. The same rules are repeated as
validation blocks in terraform/ (defence in depth), but users see these first.
Importing this module registers the check with the scenario package
(:func:`mqlab.scenario.checks.register`): every scenario loaded afterwards whose
target is "aws" passes through it.
"""

from __future__ import annotations

import ipaddress
import re

from mqlab.errors import ScenarioError
from mqlab.scenario import checks
from mqlab.scenario.model import Scenario

INSTANCE_TYPE = re.compile(r"^[a-z][a-z0-9-]*\.[a-z0-9]+$")
REGION = re.compile(r"^[a-z]{2}(-gov)?-[a-z]+-[0-9]$")
AMI_ID = re.compile(r"^ami-[0-9a-f]{8,17}$")
EBS_TYPES = ("gp2", "gp3", "io1", "io2", "st1")
MAX_BROKERS = 15
MAX_CLIENTS_PER_ROLE = 64


def on_aws(scenario: Scenario) -> None:
    """The registered check: :func:`validate_aws` for a scenario whose target is AWS."""
    if scenario.cluster.target == "aws":
        validate_aws(scenario)


def validate_aws(scenario: Scenario) -> None:
    """Raise ScenarioError for the first problem that makes the scenario unusable on AWS."""
    path = scenario.source
    aws = scenario.cluster.aws
    if aws is None:
        raise ScenarioError(
            path,
            "cluster.aws.operator_cidr",
            "missing ([cluster.aws] table absent)",
            'add [cluster.aws] with operator_cidr = "YOUR.IP.ADDR.ESS/32"',
        )

    def fail(field: str, problem: str, fix: str) -> None:
        raise ScenarioError(path, f"cluster.aws.{field}", problem, fix)

    if not REGION.match(aws.region):
        fail("region", f"{aws.region!r} is not an AWS region name", 'e.g. region = "eu-west-1"')
    for field in ("broker_instance_type", "client_instance_type"):
        value = getattr(aws, field)
        if not INSTANCE_TYPE.match(value):
            fail(
                field, f"{value!r} is not an instance type", 'write FAMILY.SIZE, e.g. "r5.2xlarge"'
            )
    if aws.ebs_type not in EBS_TYPES:
        fail("ebs_type", f"{aws.ebs_type!r} is not an EBS type", "one of: " + ", ".join(EBS_TYPES))
    if not 8 <= aws.ebs_size_gb <= 16384:
        fail("ebs_size_gb", f"{aws.ebs_size_gb} GiB is out of range", "use 8..16384")
    if not 1 <= aws.availability_zones <= 6:
        fail("availability_zones", f"{aws.availability_zones} is out of range", "use 1..6")
    if aws.ami_id and not AMI_ID.match(aws.ami_id):
        fail(
            "ami_id",
            f"{aws.ami_id!r} is not an AMI id",
            'e.g. "ami-0123456789abcdef0", or leave it out to look the image up by tags',
        )
    if aws.ttl_hours <= 0:
        fail("ttl_hours", f"{aws.ttl_hours} is not positive", "e.g. ttl_hours = 8")
    _check_operator_cidr(scenario, aws.operator_cidr)
    nodes = scenario.cluster.nodes
    if not 1 <= nodes <= MAX_BROKERS:
        raise ScenarioError(
            path,
            "cluster.nodes",
            f"{nodes} broker nodes cannot be built on AWS",
            f"use 1..{MAX_BROKERS} (3 for a replicated cluster)",
        )
    for role in ("sender_nodes", "receiver_nodes"):
        n = getattr(scenario.clients, role)
        if not 0 <= n <= MAX_CLIENTS_PER_ROLE:
            raise ScenarioError(
                path,
                f"clients.{role}",
                f"{n} nodes is out of range for AWS",
                f"use 0..{MAX_CLIENTS_PER_ROLE}",
            )


def _check_operator_cidr(scenario: Scenario, cidr: str | None) -> None:
    key = "cluster.aws.operator_cidr"
    fix = 'your public address as a /32, e.g. operator_cidr = "203.0.113.7/32"'
    if not cidr:
        raise ScenarioError(scenario.source, key, "missing (SSH is opened to this CIDR only)", fix)
    try:
        net = ipaddress.ip_network(cidr, strict=False)
    except ValueError:
        raise ScenarioError(scenario.source, key, f"{cidr!r} is not a CIDR block", fix) from None
    if net.version != 4:
        raise ScenarioError(scenario.source, key, f"{cidr!r} is IPv6; the lab VPC is IPv4", fix)
    if net.prefixlen == 0:
        raise ScenarioError(scenario.source, key, f"{cidr!r} opens SSH to the whole internet", fix)


checks.register(on_aws)
