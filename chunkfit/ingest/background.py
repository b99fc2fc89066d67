"""Run an iterator in a background thread so reading, parsing and writing overlap."""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterable, Iterator
from typing import TypeVar

T = TypeVar("T")
_DONE = object()


def background(items: Iterable[T], depth: int = 2) -> Iterator[T]:
    """Yield ``items`` in order while a thread produces up to ``depth`` ahead.

    An error in the thread re-raises here."""
    q: queue.Queue[object] = queue.Queue(maxsize=depth)
    stop = threading.Event()

    def produce() -> None:
        try:
            for item in items:
                while not stop.is_set():
                    try:
                        q.put(item, timeout=0.1)
                        break
                    except queue.Full:
                        continue
                if stop.is_set():
                    return
            q.put(_DONE)
        except BaseException as err:  # handed to the consumer, which re-raises it
            q.put(err)

    thread = threading.Thread(target=produce, name="chunkfit-prefetch", daemon=True)
    thread.start()
    try:
        while True:
            item = q.get()
            if item is _DONE:
                return
            if isinstance(item, BaseException):
                raise item
            yield item  # type: ignore[misc]
    finally:
        stop.set()
