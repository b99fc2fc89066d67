"""The workers of a multi-worker run as one TensorFlow collective: small values exchanged between
them, their meeting before training, and a lost worker told in one line, before the cluster has
formed (``forming``) or after.

Every exchange is one all-reduce of a [workers, 3] int64 matrix in which each worker fills its own
row, so it needs no other channel than the training's own collectives.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import select
import signal
import socket
import sys
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from ...errors import RunError, UsageError, WorkerLostError
from .cluster import Cluster

PROBE_FILE = ".chunkfit-workers"


@contextlib.contextmanager
def forming(cluster: Cluster) -> Iterator[None]:
    """While TensorFlow forms ``cluster`` (MultiWorkerMirroredStrategy waits, inside its runtime and
    without a limit, for every worker to register): after ``cluster.timeout`` seconds, one line
    naming the missing worker on stderr, and this process is killed.

    The wait holds the interpreter's lock, so no thread of this process can end it: a forked watcher
    does, woken early by the end of a pipe once the cluster has formed (or this process has died).
    Once the cluster has formed, a lost worker is found by TensorFlow's heartbeats
    (``Workers.lost``).
    """
    sys.stdout.flush()
    sys.stderr.flush()
    err_fd = sys.stderr.fileno()
    parent = os.getpid()
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the watcher: only what is safe after a fork, and out by os._exit
        code = 0
        try:
            os.close(write_end)
            if not select.select([read_end], [], [], cluster.timeout)[0]:
                line = f"chunkfit: error: {_missing_message(cluster)}\n"
                os.write(err_fd, line.encode("utf-8", "backslashreplace"))
                os.kill(parent, signal.SIGKILL)
        except BaseException:
            code = 1
        os._exit(code)
    os.close(read_end)
    try:
        yield
    finally:
        os.close(write_end)
        os.waitpid(pid, 0)


def _missing_message(c: Cluster) -> str:
    """Which workers did not join ``c``: those nothing answers for at their address, else all the
    others (started, but not joined)."""
    others = [r for r in range(len(c.addresses)) if r != c.rank]
    silent = [r for r in others if not _answers(c.addresses[r])]
    named = ", ".join(
        f"worker {r} ({c.addresses[r]}, TF_CONFIG task {c.jobs[r][0]}:{c.jobs[r][1]})"
        for r in silent or others
    )
    why = ", and nothing answers at its address" if silent else ""
    return (
        f"{named} did not join the cluster within {c.timeout:g} s (--cluster-timeout){why}; this "
        f"worker, {c.name(c.rank)}, stopped waiting: start the same chunkfit train command on "
        "every worker, or give them longer with --cluster-timeout"
    )


def _answers(address: str, wait: float = 2.0) -> bool:
    """Whether something accepts a TCP connection at ``address`` (host:port)."""
    host, port = address.rsplit(":", 1)
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=wait):
            return True
    except (OSError, ValueError):
        return False


class Workers:
    """The workers of ``cluster`` (None: one machine, where there is no one to meet) under
    ``strategy``, with ``replicas`` replicas in all."""

    def __init__(self, strategy: Any, cluster: Cluster | None, replicas: int) -> None:
        self.strategy, self.cluster, self.replicas = strategy, cluster, replicas
        self._exchange_fn: Any = None

    def exchange(self, values: list[int]) -> np.ndarray:
        """Every worker's ``values`` (up to 3 int64), in rank order: [workers, 3] (by one
        all-reduce of a matrix where each worker fills its own row, compiled once)."""
        import tensorflow as tf

        workers = len(self.cluster.addresses) if self.cluster is not None else 1
        rank = self.cluster.rank if self.cluster is not None else 0
        if self._exchange_fn is None:
            strategy = self.strategy
            local = self.replicas // workers

            def replica(m: Any) -> Any:
                ctx = tf.distribute.get_replica_context()
                # one replica per worker
                first = tf.cast(tf.equal(ctx.replica_id_in_sync_group % local, 0), tf.int64)
                return ctx.all_reduce(tf.distribute.ReduceOp.SUM, m * first)

            self._exchange_fn = tf.function(
                lambda m: strategy.experimental_local_results(strategy.run(replica, (m,)))[0],
                input_signature=[tf.TensorSpec([workers, 3], tf.int64)],
                autograph=False,
            )
        mine = np.zeros((workers, 3), np.int64)
        mine[rank, : len(values)] = values
        with self.lost():
            return np.asarray(self._exchange_fn(tf.constant(mine)))

    def same_checkpoint(self, where: str | None, sequence: int | None) -> None:
        """Refuse, in one line, a worker that found another checkpoint (``sequence``, None: none)
        than the chief."""
        if self.cluster is None:
            return
        found = self.exchange([sequence if sequence is not None else -1])
        if int(found[self.cluster.rank][0]) != int(found[0][0]):
            raise RunError(
                f"{where}: this worker found another checkpoint in the run folder than the "
                "chief; give every worker the same --out on storage they all reach"
            )

    def meet(
        self,
        identity: dict[str, Any],
        where: str | None,
        *,
        write: Callable[[str, str], None] | None = None,
        read: Callable[[str], str | None] | None = None,
        remove: Callable[[str], None] | None = None,
    ) -> None:
        """Before training: every worker was started with the chief's settings (a hash of the run's
        identity, gathered), and every worker reads the run folder ``where`` the chief writes (on a
        shared file system or on object storage): the chief writes a nonce there by ``write(name,
        text)``, every other worker reads it back by ``read(name)`` (None when there is none), the
        verdicts are gathered, and the chief removes it by ``remove(name)``. Refuses with one line
        naming the worker."""
        c = self.cluster
        if c is None:
            return
        digest = hashlib.sha256(json.dumps(identity, sort_keys=True, default=str).encode()).digest()
        mine = [int.from_bytes(digest[i : i + 7], "big") for i in (0, 7, 14)]
        hashes = self.exchange(mine)
        differ = [r for r in range(len(hashes)) if list(hashes[r]) != list(hashes[0])]
        if differ:
            raise UsageError(
                f"{c.name(differ[0])} was started with other settings, model or store than the "
                f"chief, {c.name(0)}; run the same chunkfit train command on every worker"
            )
        nonce = int.from_bytes(os.urandom(7), "big")
        write = write if c.chief else None
        try:
            if write is not None:
                write(PROBE_FILE, str(nonce))
            chief_nonce, chief_wrote = (
                int(v) for v in self.exchange([nonce, int(write is not None)])[0][:2]
            )
            seen = 1
            if not c.chief and chief_wrote:  # without a run folder there is nothing to read
                try:
                    seen = int(
                        read is not None and (read(PROBE_FILE) or "").strip() == str(chief_nonce)
                    )
                except (OSError, ValueError):
                    seen = 0
            verdicts = self.exchange([seen])
        finally:
            if write is not None and remove is not None:
                with contextlib.suppress(OSError):
                    remove(PROBE_FILE)
        blind = [r for r in range(len(verdicts)) if not verdicts[r][0]]
        if blind:
            raise RunError(
                f"{where}: {c.name(blind[0])} cannot read the run folder the chief, {c.name(0)}, "
                "writes; give every worker the same --out on storage they all reach (a shared file "
                "system, or the same s3:// URL)"
            )

    @contextlib.contextmanager
    def lost(self) -> Iterator[None]:
        """A collective that failed because a worker stopped, as one line naming it."""
        import tensorflow as tf

        try:
            yield
        except (
            tf.errors.UnavailableError,
            tf.errors.AbortedError,
            tf.errors.DeadlineExceededError,
            tf.errors.CancelledError,
            tf.errors.InternalError,
        ) as err:
            if self.cluster is None:
                raise
            raise WorkerLostError(self._lost_message(str(err))) from None

    def _lost_message(self, text: str) -> str:
        c = self.cluster
        assert c is not None
        who = "another worker"
        for job, index in re.findall(r"/job:(\w+)/(?:replica:\d+/)?task:(\d+)", text):
            rank = c.rank_of(job, int(index))
            if rank is not None and rank != c.rank:
                who = c.name(rank)
                break
        reason = (
            "stopped answering" if "heartbeat" in text or "unhealthy" in text else "is unreachable"
        )
        return (
            f"{who} {reason}, so this worker, {c.name(c.rank)}, stopped training; run the same "
            "chunkfit train command on every worker to resume from the run's last checkpoint"
        )
