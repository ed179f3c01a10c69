from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from typing import Any

import pytest


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    """One local[2] SparkSession for all Spark tests, with the dmq format registered."""
    pytest.importorskip("pyspark")
    from pyspark.sql import SparkSession

    from dmq.spark import register

    os.environ["PYSPARK_PYTHON"] = sys.executable
    session = (SparkSession.builder.master("local[2]").appName("dmq-tests")
               .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "2")
               .config("spark.sql.session.timeZone", "UTC").getOrCreate())
    session.sparkContext.setLogLevel("ERROR")
    register(session)
    yield session
    session.stop()
