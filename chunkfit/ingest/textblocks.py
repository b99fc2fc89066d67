"""Raw bytes in, blocks of whole lines out: from files, gzip files or a live standard input.

A block always ends at a line break, so a parser never sees half a row. Standard input yields a
block as soon as the writer pauses, so a ``tail -f`` stream is stored as it arrives.
"""

from __future__ import annotations

import hashlib
import os
import select
from collections.abc import Iterator
from typing import BinaryIO


class LineBlocks:
    """Iterate over ``(first_line_number, block_bytes)``; keeps a running sha256 and byte count."""

    def __init__(self, stream: BinaryIO, block_bytes: int, live: bool = False) -> None:
        self.stream = stream
        self.block_bytes = block_bytes
        self.live = live
        self.sha256 = hashlib.sha256()
        self.bytes_read = 0
        self.interrupted = False

    def _read_live(self) -> bytes:
        """Read what standard input has, waiting for the first byte but not for a full block."""
        fd = self.stream.fileno()
        parts: list[bytes] = []
        have = 0
        while have < self.block_bytes:
            if parts:
                ready, _, _ = select.select([fd], [], [], 0.2)
                if not ready:
                    break
            try:
                data = os.read(fd, min(1 << 20, self.block_bytes - have))
            except KeyboardInterrupt:
                # Ctrl-C ends a live stream: what arrived so far is kept and committed.
                self.interrupted = True
                break
            if not data:
                break
            parts.append(data)
            have += len(data)
        return b"".join(parts)

    def __iter__(self) -> Iterator[tuple[int, bytes]]:
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
                if carry.strip() and not self.interrupted:
                    yield line_no, carry if carry.endswith(b"\n") else carry + b"\n"
                return
            buf = carry + data if carry else data
            cut = buf.rfind(b"\n")
            if cut < 0:
                carry = buf
                continue
            block, carry = buf[: cut + 1], buf[cut + 1 :]
            yield line_no, block
            line_no += block.count(b"\n")
