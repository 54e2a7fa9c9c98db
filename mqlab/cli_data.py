"""Data-pipeline commands: summarize, query, report, compare (thin wrappers)."""

import click

DATA_COMMANDS: list[click.Command] = []
