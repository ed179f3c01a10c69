"""PySpark source and sink for dmq (Spark 4.2+ Python Data Source API, no JVM jars).

    from dmq.spark import register
    register(spark)                       # once per SparkSession
    spark.readStream.format("dmq").option("bootstrap.servers", "127.0.0.1:9092")...
"""

from __future__ import annotations

from typing import Any


def register(spark: Any) -> None:
    """Register the ``dmq`` format with a SparkSession."""
    from dmq.spark.source import DmqDataSource

    spark.dataSource.register(DmqDataSource)
