"""The arithmetic of a run on several workers or devices, without TensorFlow: the cluster TF_CONFIG
describes, ``--devices``, and which windows of each global batch each replica trains.

chunkfit.train.tensorflow.distributed trains with them; this module checks a run's settings before
TensorFlow loads.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import re

import numpy as np

from ...errors import UsageError

DEVICE_CHOICES = "all or cpu:N"
CLUSTER_TIMEOUT = 300.0  # seconds the workers wait for each other to start (--cluster-timeout)


@dataclasses.dataclass(frozen=True)
class Cluster:
    """The workers of a TF_CONFIG run: their addresses in rank order (the chief first) and this
    one's rank; ``timeout``: the seconds a worker waits for the others to join."""

    addresses: tuple[str, ...]
    rank: int
    jobs: tuple[tuple[str, int], ...]  # (job, task index) of each rank, as TensorFlow names them
    timeout: float = CLUSTER_TIMEOUT

    @property
    def chief(self) -> bool:
        return self.rank == 0

    def name(self, rank: int) -> str:
        return f"worker {rank} ({self.addresses[rank]})"

    def rank_of(self, job: str, index: int) -> int | None:
        return next((r for r, j in enumerate(self.jobs) if j == (job, index)), None)


def cluster_from_env(environ: dict[str, str] | None = None) -> Cluster | None:
    """The cluster TF_CONFIG describes; None without TF_CONFIG or with a single task."""
    text = (os.environ if environ is None else environ).get("TF_CONFIG")
    if text is None or not text.strip():
        return None
    return parse_tf_config(text)


def parse_tf_config(text: str) -> Cluster | None:
    """TF_CONFIG as TensorFlow reads it: ``{"cluster": {"chief": [...], "worker": [...]}, "task":
    {"type": "worker", "index": 1}}``; the chief (or worker 0 without one) is rank 0."""

    def bad(why: str) -> UsageError:
        shown = text if len(text) <= 200 else text[:200] + "..."
        return UsageError(
            f"TF_CONFIG is not a valid cluster description ({why}; received {shown}); set it to "
            '{"cluster": {"worker": ["host1:port", "host2:port"]}, '
            '"task": {"type": "worker", "index": 0}}'
        )

    try:
        config = json.loads(text)
    except ValueError as err:
        raise bad(f"not JSON: {err}") from None
    if (
        not isinstance(config, dict)
        or not isinstance(config.get("cluster"), dict)
        or not isinstance(config.get("task"), dict)
    ):
        raise bad("it needs a 'cluster' and a 'task' object")
    cluster, task = config["cluster"], config["task"]
    other = sorted(set(cluster) - {"chief", "worker"})
    if other:
        raise bad(
            f"job {other[0]!r}: chunkfit runs synchronous workers only (jobs chief and worker)"
        )
    jobs: list[tuple[str, int]] = []
    addresses: list[str] = []
    for job in ("chief", "worker"):
        hosts = cluster.get(job, [])
        if not isinstance(hosts, list) or not all(
            isinstance(h, str) and re.fullmatch(r".+:\d+", h) for h in hosts
        ):
            raise bad(f"cluster.{job} must be a list of 'host:port' strings")
        if job == "chief" and len(hosts) > 1:
            raise bad("there can be one chief")
        jobs += [(job, i) for i in range(len(hosts))]
        addresses += hosts
    if len(set(addresses)) != len(addresses):
        raise bad("two tasks share an address")
    kind, index = task.get("type"), task.get("index", 0)
    if isinstance(index, bool) or not isinstance(index, int):
        raise bad("task.index must be an integer")
    if (kind, index) not in jobs:
        raise bad(f"task {kind}:{index} is not in the cluster")
    if len(addresses) < 2:
        return None
    return Cluster(tuple(addresses), jobs.index((kind, index)), tuple(jobs))


def check_cluster_timeout(seconds: float) -> float:
    """``--cluster-timeout``: a positive number of seconds."""
    if (
        isinstance(seconds, bool)
        or not isinstance(seconds, int | float)
        or not math.isfinite(seconds)
        or seconds <= 0
    ):
        raise UsageError(
            f"--cluster-timeout must be a positive number of seconds (received {seconds!r})"
        )
    return float(seconds)


def check_devices(devices: str | None) -> int | None:
    """``--devices``: None (one device), "all" (0 here: every GPU) or "cpu:N" (N logical CPU
    devices)."""
    if devices is None or devices == "all":
        return None if devices is None else 0
    match = re.fullmatch(r"cpu:(\d+)", devices)
    if match is None or int(match[1]) < 1:
        raise UsageError(f"--devices must be {DEVICE_CHOICES} (received {devices!r})")
    return int(match[1])


def shares(n: int, batch: int, replicas: int) -> tuple[np.ndarray, np.ndarray]:
    """The positions (into a group's shuffled windows) each replica trains, batch by batch.

    Returns ``index`` [batches, replicas, per] and ``real`` (same shape, bool): global batch b holds
    windows [b*batch, min((b+1)*batch, n)); of its m windows replica r takes [r*m//R, (r+1)*m//R),
    padded with window 0 (``real`` False) to ``per = ceil(batch / R)``. Example: n=10, batch=4, R=2:
    batches [0..3], [4..7], [8, 9]; replica 0 takes 0-1, 4-5, 8; replica 1 takes 2-3, 6-7, 9.
    """
    per = -(-batch // replicas)
    batches = -(-n // batch)
    index = np.zeros((batches, replicas, per), np.int64)
    real = np.zeros((batches, replicas, per), bool)
    for b in range(batches):
        start, m = b * batch, min(batch, n - b * batch)
        for r in range(replicas):
            lo, hi = r * m // replicas, (r + 1) * m // replicas
            index[b, r, : hi - lo] = np.arange(start + lo, start + hi)
            real[b, r, : hi - lo] = True
    return index, real


def share_ranges(n: int, batch: int, replicas: int, replica: int) -> dict[str, list[int]]:
    """Replica ``replica``'s slice of a full global batch and of the short last one, for
    run.json."""
    full, short = divmod(n, batch)
    out = {"full_batches": [full, replica * batch // replicas, (replica + 1) * batch // replicas]}
    if short:
        out["last_batch"] = [
            full * batch + replica * short // replicas,
            full * batch + (replica + 1) * short // replicas,
        ]
    return out
