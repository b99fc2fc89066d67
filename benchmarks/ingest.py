"""Ingest throughput and memory against parse-only readers, measured side by side in one run.

    python benchmarks/ingest.py [--rows 5000000 10000000] [--repeats 3]

Writes a numeric CSV (rows x 4 channels) per size under bench-out/, then, in rounds so that machine
noise hits every reader alike, runs each reader in its own subprocess: pandas (chunked) and pyarrow
(streaming) only parse; chunkfit parses, checks, hashes, computes stats and writes a compressed zarr
store. Prints MB of CSV per second (median of the rounds), the ratio to the fastest parse-only
reader, and each process's peak RSS.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

OUT = Path("bench-out")
READERS = ("pandas-chunked", "pyarrow-stream", "chunkfit-ingest")


def make_csv(rows: int) -> Path:
    path = OUT / f"ingest-{rows}.csv"
    if path.exists():
        return path
    import numpy as np

    OUT.mkdir(exist_ok=True)
    rng = np.random.default_rng(0)
    tmp = path.with_suffix(".partial")
    with open(tmp, "w") as f:
        f.write("a,b,c,d\n")
        for start in range(0, rows, 500_000):
            n = min(500_000, rows - start)
            block = np.round(rng.normal(size=(n, 4)), 5)
            np.savetxt(f, block, fmt="%.5f", delimiter=",")
    tmp.rename(path)
    return path


def worker(reader: str, csv: str) -> None:
    """Run one reader over ``csv`` in this process and print seconds and peak RSS as JSON."""
    started = time.perf_counter()
    rows = 0
    if reader == "pandas-chunked":
        import pandas as pd

        for chunk in pd.read_csv(csv, chunksize=1_000_000, dtype="float64"):
            rows += len(chunk)
    elif reader == "pyarrow-stream":
        import pyarrow as pa
        import pyarrow.csv as pacsv

        types = {c: pa.float64() for c in "abcd"}
        for batch in pacsv.open_csv(csv, convert_options=pacsv.ConvertOptions(column_types=types)):
            rows += batch.num_rows
    else:
        from chunkfit import IngestOptions, ingest

        store = Path(csv).with_suffix(".zarr")
        shutil.rmtree(store, ignore_errors=True)
        rows = ingest(str(store), [csv], IngestOptions(rate=100.0)).samples
        shutil.rmtree(store, ignore_errors=True)
    seconds = time.perf_counter() - started
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    print(json.dumps({"seconds": seconds, "rows": rows, "peak_rss": peak}))


def run(reader: str, csv: Path) -> dict[str, float]:
    cmd = [sys.executable, __file__, "--worker", reader, str(csv)]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, nargs="+", default=[5_000_000, 10_000_000])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--worker", nargs=2, metavar=("READER", "CSV"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        worker(*args.worker)
        return
    print(
        f"# {' '.join(['python', 'benchmarks/ingest.py'] + sys.argv[1:])}  ({os.cpu_count()} cores)"
    )
    for rows in args.rows:
        csv = make_csv(rows)
        mb = csv.stat().st_size / 1e6
        results: dict[str, list[dict[str, float]]] = {r: [] for r in READERS}
        for _ in range(args.repeats):
            for reader in READERS:
                results[reader].append(run(reader, csv))
        speed = {r: mb / statistics.median(x["seconds"] for x in v) for r, v in results.items()}
        fastest = max(("pandas-chunked", "pyarrow-stream"), key=lambda r: speed[r])
        print(f"\n{rows:,} rows x 4 channels, {mb:,.0f} MB of CSV; median of {args.repeats} rounds")
        print(f"| reader | work | MB/s | vs fastest parse-only ({fastest}) | peak RSS MB |")
        print("|---|---|---:|---:|---:|")
        for reader in READERS:
            work = (
                "parse + check + hash + stats + compress + write zarr"
                if reader == "chunkfit-ingest"
                else "parse only"
            )
            peak = max(x["peak_rss"] for x in results[reader]) / 1e6
            print(
                f"| {reader} | {work} | {speed[reader]:.0f} | "
                f"{speed[reader] / speed[fastest]:.2f}x | {peak:.0f} |"
            )


if __name__ == "__main__":
    main()
