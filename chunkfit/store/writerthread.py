"""The store writer's background thread: statistics, encoding and writes of the blocks given to it,
run in order while the caller parses the next block."""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable

Job = Callable[[], None]


class WriterThread:
    """Runs jobs one after another in one thread, started by the first job. At most ``depth`` jobs
    wait, so the caller blocks rather than buffering without end. After a job fails, the jobs
    queued behind it are skipped until its failure is taken (``take_error``)."""

    def __init__(self, name: str = "chunkfit-writer", depth: int = 2) -> None:
        self.name = name
        self.depth = depth
        self._queue: queue.Queue[Job | None] = queue.Queue(maxsize=depth)
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None

    def submit(self, job: Job) -> None:
        """Run ``job`` in the thread, after the jobs before it."""
        if self._thread is None:
            self._queue = queue.Queue(maxsize=self.depth)
            self._thread = threading.Thread(target=self._work, name=self.name, daemon=True)
            self._thread.start()
        self._queue.put(job)

    def stop(self) -> None:
        """Wait until every job given so far has run (or been skipped), and end the thread; a later
        ``submit`` starts another."""
        if self._thread is not None:
            self._queue.put(None)
            self._thread.join()
            self._thread = None

    def take_error(self) -> BaseException | None:
        """The failure of a job, once; None when none failed since the last call."""
        err, self._error = self._error, None
        return err

    def _work(self) -> None:
        while True:
            job = self._queue.get()
            if job is None:
                return
            if self._error is not None:
                continue
            try:
                job()
            except BaseException as err:  # raised in the caller's thread by ``take_error``'s caller
                self._error = err
