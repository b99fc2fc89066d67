"""``chunkfit launch``: N local worker processes of one multi-worker run, on 127.0.0.1, for trying
it out.

Each worker is ``python -m chunkfit ARGS`` with its own TF_CONFIG (free loopback ports), exactly as
on separate machines. The chief's output is shown; the other workers' stdout is dropped, their
errors are shown. When one worker fails, the others stop on their own (TensorFlow finds the lost
worker within seconds); any still running after ``grace`` seconds are killed.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Sequence

from ..errors import UsageError


def loopback_cluster(workers: int) -> list[str]:
    """``workers`` addresses 127.0.0.1:PORT on ports free now."""
    socks = [socket.socket() for _ in range(workers)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [f"127.0.0.1:{s.getsockname()[1]}" for s in socks]
    finally:
        for s in socks:
            s.close()


def launch(workers: int, args: Sequence[str], grace: float = 60.0) -> int:
    """Run ``chunkfit ARGS`` as ``workers`` workers of one cluster; returns the first failing exit
    status (or 0)."""
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 2:
        raise UsageError(f"--workers must be 2 or more (received {workers!r})")
    if not args or args[0] != "train":
        raise UsageError(
            "chunkfit launch runs chunkfit train: chunkfit launch --workers 2 -- train STORE --out "
            "RUN ..."
        )
    hosts = loopback_cluster(workers)
    procs = []
    try:
        for i in range(workers):
            config = json.dumps(
                {"cluster": {"worker": hosts}, "task": {"type": "worker", "index": i}}
            )
            procs.append(
                subprocess.Popen(
                    [sys.executable, "-m", "chunkfit", *args],
                    env={**os.environ, "TF_CONFIG": config},
                    stdout=None if i == 0 else subprocess.DEVNULL,
                )
            )
        codes: dict[int, int] = {}
        deadline: float | None = None
        while len(codes) < workers:
            for i, p in enumerate(procs):
                if i not in codes and p.poll() is not None:
                    codes[i] = p.returncode
                    if p.returncode != 0 and deadline is None:
                        deadline = time.monotonic() + grace
            if deadline is not None and time.monotonic() > deadline:
                break
            time.sleep(0.1)
        return next(
            (c for _, c in sorted(codes.items()) if c != 0), 0 if len(codes) == workers else 1
        )
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
