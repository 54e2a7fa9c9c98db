"""`mqlab infra ...` commands (thin: each parses arguments and calls one function)."""

import click


@click.group()
def infra() -> None:
    """Terraform-driven lab environments on AWS."""
