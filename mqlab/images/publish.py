"""`mqlab images publish`: import a built NixOS image into AWS as a tagged AMI.

Steps: upload the disk image to S3, import it as an EBS snapshot
(ec2:ImportSnapshot, needs the `vmimport` service role), register an AMI from
the snapshot, and tag AMI and snapshot with the keys the Terraform modules
look AMIs up by (TAG_BROKER, TAG_FLAKE_REV, TAG_NIXPKGS_REV).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mqlab.images.build import ImageError

LOG = logging.getLogger(__name__)

TAG_BROKER = "mqlab:broker"
TAG_FLAKE_REV = "mqlab:flake-rev"
TAG_NIXPKGS_REV = "mqlab:nixpkgs-rev"
DISK_FORMATS = {".vhd": "VHD", ".vhdx": "VHD", ".raw": "RAW", ".img": "RAW", ".vmdk": "VMDK"}


@dataclass(frozen=True)
class ImageProvenance:
    broker: str
    flake_rev: str
    nixpkgs_rev: str

    def tags(self) -> list[dict[str, str]]:
        return [
            {"Key": TAG_BROKER, "Value": self.broker},
            {"Key": TAG_FLAKE_REV, "Value": self.flake_rev},
            {"Key": TAG_NIXPKGS_REV, "Value": self.nixpkgs_rev},
            {"Key": "Name", "Value": f"mqlab-{self.broker}"},
        ]


def find_disk_image(result: Path) -> Path:
    """The disk file inside a `nix build .#ami-*` result (image-info.json, else by suffix)."""
    info = result / "nix-support" / "image-info.json"
    if info.is_file():
        data = json.loads(info.read_text())
        file = data.get("file") or data.get("disks", {}).get("root", {}).get("file")
        if file:
            return Path(file)
    for path in sorted(result.iterdir()) if result.is_dir() else []:
        if path.suffix in DISK_FORMATS:
            return path
    raise ImageError(f"{result}: no disk image (.vhd/.raw/.img) found in the build result")


def upload(s3: Any, disk: Path, bucket: str, key: str) -> None:
    LOG.info("uploading %s to s3://%s/%s", disk, bucket, key)
    s3.upload_file(str(disk), bucket, key)


def import_snapshot(ec2: Any, bucket: str, key: str, fmt: str, poll_s: float = 15.0) -> str:
    """ec2:ImportSnapshot from S3 and wait for the snapshot id."""
    task = ec2.import_snapshot(
        Description=f"mqlab image {key}",
        DiskContainer={"Format": fmt, "UserBucket": {"S3Bucket": bucket, "S3Key": key}},
    )
    task_id = task["ImportTaskId"]
    while True:
        resp = ec2.describe_import_snapshot_tasks(ImportTaskIds=[task_id])
        detail = resp["ImportSnapshotTasks"][0]["SnapshotTaskDetail"]
        status = detail.get("Status")
        if status == "completed":
            return str(detail["SnapshotId"])
        if status in ("deleted", "deleting", "error"):
            raise ImageError(
                f"snapshot import {task_id} {status}: {detail.get('StatusMessage', '')}"
            )
        LOG.info("import %s: %s %s%%", task_id, status, detail.get("Progress", "?"))
        time.sleep(poll_s)


def register(ec2: Any, snapshot_id: str, prov: ImageProvenance, arch: str = "x86_64") -> str:
    name = f"mqlab-{prov.broker}-{prov.flake_rev[:12]}-{int(time.time())}"
    resp = ec2.register_image(
        Name=name,
        Description=f"mqlab {prov.broker} (flake {prov.flake_rev}, nixpkgs {prov.nixpkgs_rev})",
        Architecture=arch,
        VirtualizationType="hvm",
        EnaSupport=True,
        RootDeviceName="/dev/xvda",
        BlockDeviceMappings=[
            {
                "DeviceName": "/dev/xvda",
                "Ebs": {
                    "SnapshotId": snapshot_id,
                    "VolumeType": "gp3",
                    "DeleteOnTermination": True,
                },
            }
        ],
    )
    ami_id = str(resp["ImageId"])
    # tagged in a separate call so the same code works where register_image
    # ignores TagSpecifications
    ec2.create_tags(Resources=[ami_id, snapshot_id], Tags=prov.tags())
    return ami_id


def publish_image(
    result: Path,
    prov: ImageProvenance,
    bucket: str,
    session: Any,
    importer: Callable[[Any, str, str, str], str] = import_snapshot,
) -> str:
    """Upload, import and register; returns the new AMI id."""
    disk = find_disk_image(result)
    fmt = DISK_FORMATS.get(disk.suffix, "RAW")
    key = f"mqlab-images/{prov.broker}/{prov.flake_rev}/{disk.name}"
    s3 = session.client("s3")
    ec2 = session.client("ec2")
    try:
        upload(s3, disk, bucket, key)
        snapshot_id = importer(ec2, bucket, key, fmt)
        return register(ec2, snapshot_id, prov)
    except ImageError:
        raise
    except Exception as err:  # botocore's ClientError/NoCredentialsError: the user's to fix
        if type(err).__module__.startswith(("botocore", "boto3")):
            raise ImageError(f"publishing {prov.broker} image: {err}") from err
        raise


def find_amis(ec2: Any, broker: str) -> list[dict[str, Any]]:
    """AMIs tagged for `broker`, newest first: the lookup the Terraform modules do."""
    resp = ec2.describe_images(
        Owners=["self"], Filters=[{"Name": f"tag:{TAG_BROKER}", "Values": [broker]}]
    )
    images: list[dict[str, Any]] = resp["Images"]
    return sorted(images, key=lambda i: i.get("CreationDate", ""), reverse=True)
