"""Spark baseline for bench/recovery.py: restart an applyInPandasWithState query.

Usage (run by bench/recovery.py in its own process, one JVM per phase):

    python bench/recovery_spark.py build   --dir D --keys N --value-bytes V --provider P
    python bench/recovery_spark.py restart --dir D --provider P

``build`` streams N rows ``(k, v)`` through ``groupBy(k).applyInPandasWithState``
keeping ``v`` (V random bytes) as each key's state, with a checkpoint under D.
``restart`` starts a new JVM, warms the session with a trivial job, then restarts
the same query from its checkpoint with one new row for an existing key and
measures from ``start()`` until that micro-batch completed: the state store has
loaded the state and the query serves the key. Prints one JSON line.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
os.environ.setdefault("PYTHONWARNINGS", "ignore")

_STATE = "org.apache.spark.sql.execution.streaming.state"
PROVIDERS = {
    "hdfs": f"{_STATE}.HDFSBackedStateStoreProvider",
    "rocksdb": f"{_STATE}.RocksDBStateStoreProvider",
}


def session(provider: str):  # type: ignore[no-untyped-def]
    from pyspark.sql import SparkSession

    return (
        SparkSession.builder.master("local[2]")
        .appName("sr3-bench-spark")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.driver.memory", "6g")
        .config("spark.sql.streaming.stateStore.providerClass", PROVIDERS[provider])
        .config("spark.sql.execution.arrow.maxRecordsPerBatch", "2000")
        .getOrCreate()
    )


def query(spark, src: Path, ckpt: Path, sink: Path):  # type: ignore[no-untyped-def]
    import pandas as pd
    from pyspark.sql.streaming.state import GroupStateTimeout

    def keep(key, pdfs, state):  # type: ignore[no-untyped-def]
        value = state.get[0] if state.exists else None
        rows = 0
        for pdf in pdfs:
            rows += len(pdf)
            value = pdf["v"].iloc[-1]
        state.update((value,))
        yield pd.DataFrame({"k": [key[0]], "n": [len(value)], "rows": [rows]})

    df = (
        spark.readStream.schema("k string, v binary")
        .option("maxFilesPerTrigger", 1000)
        .parquet(str(src))
    )
    out = df.groupBy("k").applyInPandasWithState(
        keep,
        "k string, n long, rows long",
        "v binary",
        "update",
        GroupStateTimeout.NoTimeout,
    )

    def drain(batch, batch_id):  # type: ignore[no-untyped-def]
        batch.write.format("noop").mode("overwrite").save()

    return (
        out.writeStream.outputMode("update")
        .foreachBatch(drain)
        .option("checkpointLocation", str(ckpt))
        .trigger(availableNow=True)
    )


def build(args: argparse.Namespace) -> dict[str, float]:
    import pandas as pd

    spark = session(args.provider)
    root = Path(args.dir)
    src = root / "src"
    src.mkdir(parents=True, exist_ok=True)
    block = os.urandom(1 << 20)
    per_file = max(1, min(args.keys, (64 << 20) // max(1, args.value_bytes)))
    for start in range(0, args.keys, per_file):
        stop = min(args.keys, start + per_file)
        keys = [f"k{i}" for i in range(start, stop)]
        values = [
            block[(i * 7919) % (len(block) - args.value_bytes) :][: args.value_bytes]
            if args.value_bytes < len(block)
            else os.urandom(args.value_bytes)
            for i in range(start, stop)
        ]
        pd.DataFrame({"k": keys, "v": values}).to_parquet(src / f"part-{start}.parquet")
    t0 = time.perf_counter()
    q = query(spark, src, root / "ckpt", root / "sink").start()
    q.awaitTermination()
    seconds = time.perf_counter() - t0
    spark.stop()
    return {"build_s": seconds}


def restart(args: argparse.Namespace) -> dict[str, float]:
    import pandas as pd

    t_jvm = time.perf_counter()
    spark = session(args.provider)
    spark.range(10).selectExpr("sum(id)").collect()  # warm the JVM and a task
    jvm_s = time.perf_counter() - t_jvm
    root = Path(args.dir)
    src = root / "src"
    name = f"part-restart-{time.time_ns()}.parquet"
    pd.DataFrame({"k": ["k0"], "v": [b"new"]}).to_parquet(src / name)
    t0 = time.perf_counter()
    q = query(spark, src, root / "ckpt", root / "sink").start()
    q.awaitTermination()
    seconds = time.perf_counter() - t0
    progress = q.lastProgress or {}
    spark.stop()
    return {
        "restart_s": seconds,
        "jvm_start_s": jvm_s,
        "batch_ms": float(progress.get("batchDuration", 0.0)),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("phase", choices=("build", "restart"))
    parser.add_argument("--dir", required=True)
    parser.add_argument("--keys", type=int, default=1000)
    parser.add_argument("--value-bytes", type=int, default=1024)
    parser.add_argument("--provider", choices=tuple(PROVIDERS), default="hdfs")
    args = parser.parse_args()
    result = build(args) if args.phase == "build" else restart(args)
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
