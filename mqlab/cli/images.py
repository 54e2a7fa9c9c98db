"""`mqlab images ...` commands (thin: each parses arguments and calls one function)."""

from pathlib import Path

import click

from mqlab.images.build import build_image, check_image_name, flake_revisions
from mqlab.images.publish import ImageProvenance, publish_image


@click.group()
def images() -> None:
    """Build and publish NixOS broker images (AMIs) from flake.nix."""


@images.command("build")
@click.argument("broker")
@click.option("--flake", default=".", show_default=True, help="Flake reference holding mqlab.")
def build(broker: str, flake: str) -> None:
    """Build the NixOS Amazon image of BROKER (nix build FLAKE#ami-BROKER)."""
    path = build_image(broker, flake)
    click.echo(str(path))


@images.command("publish")
@click.argument("broker")
@click.option("--bucket", required=True, help="S3 bucket for the image upload.")
@click.option("--region", default=None, help="AWS region (default: the AWS config's).")
@click.option("--flake", default=".", show_default=True, help="Flake reference holding mqlab.")
@click.option(
    "--image",
    type=click.Path(exists=True, path_type=Path),
    default=None,
    help="An already built result (default: build it now).",
)
def publish(broker: str, bucket: str, region: str | None, flake: str, image: Path | None) -> None:
    """Import BROKER's image into AWS as an AMI tagged with broker and revisions."""
    import boto3

    check_image_name(broker)
    result = image or build_image(broker, flake)
    revs = flake_revisions(flake)
    prov = ImageProvenance(broker, revs["flake_rev"], revs["nixpkgs_rev"])
    ami = publish_image(result, prov, bucket, boto3.session.Session(region_name=region))
    click.echo(ami)
