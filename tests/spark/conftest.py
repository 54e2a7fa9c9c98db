"""One SparkSession (local[2], ~9 s to start, ~0.5 GB) shared by every Spark test."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from pyspark.sql import SparkSession

from spark.summarize import build_session


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    session = build_session("local[2]", app_name="mqlab-tests", shuffle_partitions=2)
    try:
        yield session
    finally:
        session.stop()
