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
_CHOSEN_HERE = "PYSPARK_PYTHON" not in os.environ
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)


def register(spark: Any) -> None:
    """Register the ``dmq`` format with a SparkSession.

    A local session built before this package was imported, with no PYSPARK_PYTHON or
    ``spark.pyspark.python`` of its own, has its Python workers pointed at this
    interpreter too (they run on this machine; the default ``python3`` may lack pyarrow)."""
    from dmq.spark.source import DmqDataSource

    sc = spark.sparkContext
    if (_CHOSEN_HERE and sc.pythonExec == "python3" and str(sc.master).startswith("local")
            and not sc.getConf().get("spark.pyspark.python")):
        sc.pythonExec = sys.executable
    spark.dataSource.register(DmqDataSource)
