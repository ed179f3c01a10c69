"""PySpark source and sink for dmq (Spark 4.2+ Python Data Source API, no JVM jars).

    from dmq.spark import register
    register(spark)                       # once per SparkSession
    spark.readStream.format("dmq").option("bootstrap.servers", "127.0.0.1:9092")...
"""

from __future__ import annotations

import os
import sys
from typing import Any

# Spark's Python workers run ``python3`` from PATH unless told otherwise, which outside an
# activated virtualenv lacks pyarrow and dmq itself. Importing this package before the
# SparkSession is built points them at this interpreter (an explicit setting wins).
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)


def register(spark: Any) -> None:
    """Register the ``dmq`` format with a SparkSession."""
    from dmq.spark.source import DmqDataSource

    spark.dataSource.register(DmqDataSource)
