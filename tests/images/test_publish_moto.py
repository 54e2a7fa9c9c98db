"""`mqlab images publish` against moto (S3 + EC2 on 127.0.0.1).

Real against moto: the S3 upload, register_image, tagging both AMI and
snapshot, and the tag lookup the Terraform modules do. Not covered by moto:
ec2:ImportSnapshot / DescribeImportSnapshotTasks, so the import step is
replaced by a stand-in that creates a snapshot the way moto can (from a
volume); `import_snapshot`'s polling is tested with a scripted client.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from moto.server import ThreadedMotoServer

from mqlab.images.build import ImageError
from mqlab.images.publish import (
    TAG_BROKER,
    TAG_FLAKE_REV,
    TAG_NIXPKGS_REV,
    ImageProvenance,
    find_amis,
    import_snapshot,
    publish_image,
)

REGION = "eu-west-1"
FLAKE_REV = "1f" * 20
NIXPKGS_REV = "78e9c786dc08cd4f3420c2395cd977206a9b1da2"


@pytest.fixture
def moto_session(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    try:
        host, port = server.get_host_and_port()
        endpoint = f"http://{host}:{port}"
        monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
        monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
        monkeypatch.setenv("AWS_ENDPOINT_URL", endpoint)
        yield boto3.session.Session(region_name=REGION)
    finally:
        server.stop()


def moto_importer(ec2: Any, bucket: str, key: str, fmt: str) -> str:
    """Stand-in for ec2:ImportSnapshot (not implemented by moto)."""
    volume = ec2.create_volume(AvailabilityZone=f"{REGION}a", Size=8)
    snap = ec2.create_snapshot(
        VolumeId=volume["VolumeId"], Description=f"{fmt} s3://{bucket}/{key}"
    )
    return str(snap["SnapshotId"])


@pytest.mark.integration
def test_publish_uploads_registers_and_tags(moto_session: Any, tmp_path: Path) -> None:
    result = tmp_path / "result"
    result.mkdir()
    (result / "nixos-amazon-image.vhd").write_bytes(b"conectix" + b"\0" * 4096)
    bucket = "mqlab-images-test"
    # moto keeps one state per process: other tests may have registered images already
    nats_before = find_amis(moto_session.client("ec2"), "nats")
    kafka_before = {i["ImageId"] for i in find_amis(moto_session.client("ec2"), "kafka")}
    snaps_before = len(_kafka_snapshots(moto_session.client("ec2")))
    s3 = moto_session.client("s3")
    s3.create_bucket(Bucket=bucket, CreateBucketConfiguration={"LocationConstraint": REGION})

    prov = ImageProvenance("kafka", FLAKE_REV, NIXPKGS_REV)
    ami = publish_image(result, prov, bucket, moto_session, importer=moto_importer)

    key = f"mqlab-images/kafka/{FLAKE_REV}/nixos-amazon-image.vhd"
    assert s3.head_object(Bucket=bucket, Key=key)["ContentLength"] == 4104
    ec2 = moto_session.client("ec2")
    found = [i for i in find_amis(ec2, "kafka") if i["ImageId"] not in kafka_before]
    assert [i["ImageId"] for i in found] == [ami]
    tags = {t["Key"]: t["Value"] for t in found[0]["Tags"]}
    assert tags[TAG_BROKER] == "kafka"
    assert tags[TAG_FLAKE_REV] == FLAKE_REV and tags[TAG_NIXPKGS_REV] == NIXPKGS_REV
    assert len(_kafka_snapshots(ec2)) == snaps_before + 1  # the imported snapshot is tagged too
    assert find_amis(ec2, "nats") == nats_before  # publishing kafka touched no other broker


def _kafka_snapshots(ec2: Any) -> list[Any]:
    return list(
        ec2.describe_snapshots(
            OwnerIds=["self"], Filters=[{"Name": f"tag:{TAG_BROKER}", "Values": ["kafka"]}]
        )["Snapshots"]
    )


@pytest.mark.integration
def test_missing_bucket_is_one_line_user_error(moto_session: Any, tmp_path: Path) -> None:
    (tmp_path / "disk.raw").write_bytes(b"\0" * 512)
    prov = ImageProvenance("nats", FLAKE_REV, NIXPKGS_REV)
    with pytest.raises(ImageError, match="publishing nats image") as err:
        publish_image(tmp_path, prov, "no-such-bucket", moto_session, importer=moto_importer)
    assert "\n" not in str(err.value)


class ScriptedEc2:
    """Only for import_snapshot's own polling logic (moto lacks the API)."""

    def __init__(self, statuses: list[dict[str, str]]) -> None:
        self.statuses = statuses
        self.calls: list[dict[str, Any]] = []

    def import_snapshot(self, **kw: Any) -> dict[str, str]:
        self.calls.append(kw)
        return {"ImportTaskId": "import-snap-1"}

    def describe_import_snapshot_tasks(self, ImportTaskIds: list[str]) -> dict[str, Any]:  # noqa: N803
        return {"ImportSnapshotTasks": [{"SnapshotTaskDetail": self.statuses.pop(0)}]}


def test_import_snapshot_polls_until_completed() -> None:
    ec2 = ScriptedEc2(
        [{"Status": "active", "Progress": "40"}, {"Status": "completed", "SnapshotId": "snap-1"}]
    )
    assert import_snapshot(ec2, "b", "k.vhd", "VHD", poll_s=0) == "snap-1"
    assert ec2.calls[0]["DiskContainer"] == {
        "Format": "VHD",
        "UserBucket": {"S3Bucket": "b", "S3Key": "k.vhd"},
    }


def test_import_snapshot_failure_is_an_image_error() -> None:
    ec2 = ScriptedEc2(
        [{"Status": "deleted", "StatusMessage": "ClientError: Disk validation failed"}]
    )
    with pytest.raises(ImageError, match="Disk validation failed"):
        import_snapshot(ec2, "b", "k.vhd", "VHD", poll_s=0)
