"""`mqlab images ...` commands (thin: each parses arguments and calls one function)."""

import click


@click.group()
def images() -> None:
    """Build and publish NixOS broker images (AMIs) from flake.nix."""
