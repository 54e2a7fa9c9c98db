from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

import mqlab.cli.checks  # noqa: F401 - registers the checks from above (AWS, published sets)
from mqlab.errors import ScenarioError
from mqlab.scenario.load import load_scenario

CIDR = 'operator_cidr = "203.0.113.7/32"'


@pytest.mark.parametrize(
    ("aws", "field"),
    [
        ("", "cluster.aws.operator_cidr"),
        ('operator_cidr = "0.0.0.0/0"', "cluster.aws.operator_cidr"),
        ('operator_cidr = "my laptop"', "cluster.aws.operator_cidr"),
        ('operator_cidr = "2001:db8::/64"', "cluster.aws.operator_cidr"),
        (f'{CIDR}\nbroker_instance_type = "huge"', "cluster.aws.broker_instance_type"),
        (f'{CIDR}\nclient_instance_type = "R5 2XLARGE"', "cluster.aws.client_instance_type"),
        (f'{CIDR}\nregion = "Europe"', "cluster.aws.region"),
        (f'{CIDR}\nami_id = "my-image"', "cluster.aws.ami_id"),
        (f"{CIDR}\nebs_size_gb = 20000", "cluster.aws.ebs_size_gb"),
    ],
)
def test_bad_aws_field_is_named(write_scenario: Callable[..., Path], aws: str, field: str) -> None:
    path = write_scenario(aws=aws)
    with pytest.raises(ScenarioError) as err:
        load_scenario(path)
    assert err.value.key == field
    assert str(path) in str(err.value) and "\n" not in str(err.value)


def test_zero_brokers_is_refused(write_scenario: Callable[..., Path]) -> None:
    with pytest.raises(ScenarioError) as err:
        load_scenario(write_scenario(nodes=0))
    assert err.value.key == "cluster.nodes"


def test_missing_aws_table_names_operator_cidr(
    tmp_path: Path, write_scenario: Callable[..., Path]
) -> None:
    path = write_scenario()
    path.write_text(path.read_text().replace("[cluster.aws]\n" + CIDR + "\n", ""))
    with pytest.raises(ScenarioError) as err:
        load_scenario(path)
    assert err.value.key == "cluster.aws.operator_cidr"


def test_good_scenario_passes(write_scenario: Callable[..., Path]) -> None:
    (s,) = load_scenario(write_scenario(aws=f'{CIDR}\nami_id = "ami-0123456789abcdef0"'))
    assert s.cluster.aws is not None and s.cluster.aws.ami_id == "ami-0123456789abcdef0"


@pytest.mark.parametrize("name", ["quickstart-aws.toml", "mqperf-nats-aws.toml"])
def test_shipped_aws_scenarios_load(name: str) -> None:
    repo = Path(__file__).resolve().parents[3]
    scenarios = load_scenario(repo / "scenarios" / "aws" / name)
    assert all(s.cluster.target == "aws" and s.broker == "nats" for s in scenarios)
