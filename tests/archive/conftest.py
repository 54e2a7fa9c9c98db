"""Synthetic archives for the archive's tests (tests/fixtures/summarized.py)."""

from tests.fixtures.summarized import edge_run, synthetic_run

__all__ = ["edge_run", "synthetic_run"]
