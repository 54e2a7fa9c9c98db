"""`python -m mqlab` runs the CLI."""

from mqlab.cli import main

main()
