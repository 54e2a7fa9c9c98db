"""`mqlab images build`: build a broker's NixOS Amazon image with `nix build`."""

from __future__ import annotations

import json
import logging
import shutil
import subprocess
from pathlib import Path

from mqlab.brokers.registry import self_hosted_brokers
from mqlab.errors import MqlabError

LOG = logging.getLogger(__name__)

NIX_FLAGS = ["--extra-experimental-features", "nix-command flakes"]
CLIENT_IMAGE = "client"


class ImageError(MqlabError):
    """A NixOS image could not be built or published."""


def image_names() -> list[str]:
    """Every image the flake provides: one per self-hosted broker, plus client nodes."""
    return [*self_hosted_brokers(), CLIENT_IMAGE]


def check_image_name(name: str) -> None:
    if name not in image_names():
        raise ImageError(f"no image for {name!r}: choose one of {', '.join(image_names())}")


def nix_binary() -> str:
    nix = shutil.which("nix")
    if nix is None:
        raise ImageError(
            "nix is not on PATH (install Nix >= 2.8 with flakes: https://nixos.org/download)"
        )
    return nix


def _run_nix(args: list[str], what: str) -> str:
    cmd = [nix_binary(), *NIX_FLAGS, *args]
    LOG.info("running %s", " ".join(cmd))
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        lines = [ln for ln in proc.stderr.strip().splitlines() if ln.strip()]
        last = lines[-1].strip() if lines else f"exit status {proc.returncode}"
        raise ImageError(f"{what} failed: {last}")
    return proc.stdout


def build_image(
    name: str, flake: str = ".", out_link: Path | None = None, nix_args: list[str] | None = None
) -> Path:
    """`nix build FLAKE#ami-NAME [NIX_ARGS]`; returns the image's store path."""
    check_image_name(name)
    link = out_link or Path(f"result-ami-{name}")
    out = _run_nix(
        ["build", f"{flake}#ami-{name}", "--out-link", str(link), "--print-out-paths"]
        + list(nix_args or []),
        f"nix build {flake}#ami-{name}",
    )
    paths = out.strip().splitlines()
    if not paths:
        raise ImageError(f"nix build {flake}#ami-{name} printed no output path")
    return Path(paths[-1])


def flake_revisions(flake: str = ".") -> dict[str, str]:
    """The flake's own revision and its nixpkgs commit, as the image records them."""
    out = _run_nix(
        ["eval", "--json", f"{flake}#lib", "--apply", "l: { inherit (l) flakeRev nixpkgsRev; }"],
        f"nix eval {flake}#lib",
    )
    data = json.loads(out)
    return {"flake_rev": str(data["flakeRev"]), "nixpkgs_rev": str(data["nixpkgsRev"])}
