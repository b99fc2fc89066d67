"""Raw bytes in, blocks of whole lines out: from files, gzip files or a live standard input.

A block always ends at a line break, so a parser never sees half a row. Standard input yields a
block as soon as the writer pauses, so a ``tail -f`` stream is stored as it arrives.
"""

from __future__ import annotations

import hashlib
import os
import select
import signal
import threading
import time
from collections.abc import Callable, Iterator
from types import FrameType
from typing import Any, BinaryIO

import numpy as np

POLL_SECONDS = 0.2
# A steady trickle still yields a block (and a progress update) twice this often.
MAX_WAIT_SECONDS = 1.0


def count_lines(block: bytes) -> int:
    """Line breaks in ``block``; numpy counts them faster than ``bytes.count``."""
    return int(np.count_nonzero(np.frombuffer(block, dtype=np.uint8) == 10))


class LineBlocks:
    """Iterate over ``(first_line_number, block_bytes)``; keeps a running sha256 and byte count.

    A live stream ends at end of input or at the first Ctrl-C (SIGINT): the complete lines that
    arrived are kept, a half-written last line is dropped. A second Ctrl-C aborts as usual.
    """

    def __init__(
        self, stream: BinaryIO, block_bytes: int, live: bool = False, max_wait: float | None = None
    ) -> None:
        self.stream = stream
        self.block_bytes = block_bytes
        self.live = live
        # Half the commit interval of a live stream (chunkfit.ingest.live), so each commit finds
        # what arrived up to half an interval before it.
        self.max_wait = (
            min(MAX_WAIT_SECONDS, max_wait if max_wait is not None else MAX_WAIT_SECONDS) / 2
        )
        self.on_idle: Callable[[], None] | None = None  # called while a live stream is quiet
        self.sha256 = hashlib.sha256()
        self.bytes_read = 0
        self.interrupted = False

    def _on_sigint(self, signum: int, frame: FrameType | None) -> None:
        if self.interrupted:
            raise KeyboardInterrupt
        self.interrupted = True

    def _read_live(self) -> bytes:
        """Read what standard input has, waiting for the first byte but not for a full block.

        Waiting happens in ``select`` with a short timeout, never in a blocking read, so a
        Ctrl-C (which only sets a flag) ends the stream within ``POLL_SECONDS``.
        """
        fd = self.stream.fileno()
        parts: list[bytes] = []
        have = 0
        first_at = 0.0
        while have < self.block_bytes and not self.interrupted:
            if parts and time.monotonic() - first_at > self.max_wait:
                break
            ready, _, _ = select.select([fd], [], [], min(POLL_SECONDS, self.max_wait))
            if not ready:
                if parts:
                    break
                if self.on_idle is not None:
                    self.on_idle()
                continue
            data = os.read(fd, min(1 << 20, self.block_bytes - have))
            if not data:
                break
            if not parts:
                first_at = time.monotonic()
            parts.append(data)
            have += len(data)
        return b"".join(parts)

    def __iter__(self) -> Iterator[tuple[int, bytes]]:
        previous: Any = None
        if self.live and threading.current_thread() is threading.main_thread():
            previous = signal.signal(signal.SIGINT, self._on_sigint)
        try:
            yield from self._blocks()
        finally:
            if previous is not None:
                signal.signal(signal.SIGINT, previous)

    def _blocks(self) -> Iterator[tuple[int, bytes]]:
        carry = b""
        line_no = 1
        while True:
            if self.interrupted:
                data = b""
            elif self.live:
                data = self._read_live()
            else:
                data = self.stream.read(self.block_bytes)
            if data:
                self.sha256.update(data)
                self.bytes_read += len(data)
            if not data:
                # After Ctrl-C a line without its line break may be half-written: drop it.
                if carry.strip() and not self.interrupted:
                    yield line_no, carry if carry.endswith(b"\n") else carry + b"\n"
                return
            cut = data.rfind(b"\n")
            if cut < 0:
                carry += data
                continue
            # One copy per block: the carried partial line joined to a view of the new bytes.
            block = b"".join((carry, memoryview(data)[: cut + 1]))
            carry = data[cut + 1 :]
            yield line_no, block
            line_no += count_lines(block)
