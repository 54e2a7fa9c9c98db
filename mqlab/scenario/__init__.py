"""Scenarios: what to benchmark. ``model`` holds the frozen dataclasses (all that workers
import), ``load`` reads and expands scenario and profile files, ``checks`` refuses the
combinations that cannot run (with a registry of checks added from the layers above)."""
