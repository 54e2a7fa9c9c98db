from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from mqlab.brokers.registry import self_hosted_brokers
from mqlab.cli.images import images
from mqlab.errors import MqlabError
from mqlab.images.build import ImageError, build_image, image_names
from mqlab.images.publish import find_disk_image


def test_image_names_follow_the_registry() -> None:
    assert image_names() == [*self_hosted_brokers(), "client"]
    assert "sqs" not in image_names()


def test_unknown_broker_is_a_user_error() -> None:
    with pytest.raises(ImageError, match="no image for 'sqs'"):
        build_image("sqs")


def test_missing_nix_is_one_line(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # an empty directory: no nix
    with pytest.raises(ImageError) as err:
        build_image("kafka")
    assert isinstance(err.value, MqlabError) and err.value.exit_code == 2
    assert "nix is not on PATH" in str(err.value) and "\n" not in str(err.value)


def test_cli_build_surfaces_the_error(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    result = CliRunner().invoke(images, ["build", "kafka"])
    assert isinstance(result.exception, ImageError)


def test_find_disk_image(tmp_path: Path) -> None:
    (tmp_path / "nix-support").mkdir()
    disk = tmp_path / "nixos-amazon-image-26.05-x86_64-linux.vhd"
    disk.write_bytes(b"\0" * 512)
    assert find_disk_image(tmp_path) == disk  # by suffix
    (tmp_path / "nix-support" / "image-info.json").write_text(json.dumps({"file": str(disk)}))
    assert find_disk_image(tmp_path) == disk  # from image-info.json
    with pytest.raises(ImageError, match="no disk image"):
        find_disk_image(tmp_path / "nix-support")
