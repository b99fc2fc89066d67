"""CSV/TSV text as a source: a file, a gzip file or standard input, read in blocks of lines and
parsed by ``csvparse``; standard input may be a live stream.
"""

from __future__ import annotations

import gzip
import zlib
from collections.abc import Callable, Iterator
from typing import BinaryIO

from ..config import IngestOptions
from ..errors import SourceFormatError
from .block import ParsedBlock
from .csvparse import parse_blocks
from .source import Source
from .textblocks import LineBlocks


class TextSource(Source):
    def __init__(
        self, name: str, stream: BinaryIO, size: int | None, options: IngestOptions, live: bool
    ) -> None:
        self.name = name
        self.size = size
        self._lines = LineBlocks(
            stream, options.block_bytes, live=live, max_wait=options.commit_every
        )
        self._stream = stream
        self.layout, self._blocks = parse_blocks(self._lines, name, options)
        self.channels = list(self.layout.channels)
        self.has_time = self.layout.time is not None
        self.has_labels = self.layout.label is not None

    @property
    def bytes_read(self) -> int:
        return self._lines.bytes_read

    @property
    def interrupted(self) -> bool:
        return self._lines.interrupted

    def when_idle(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` whenever a live standard input has been quiet for a moment."""
        self._lines.on_idle = callback

    def blocks(self) -> Iterator[ParsedBlock]:
        for block in self._blocks:
            self.rows += block.values.shape[0]
            yield block

    def sha256(self) -> str:
        return self._lines.sha256.hexdigest()


class GzipStream:
    """A gzip file whose damage (bad header, truncation, corrupt data) is a one-line error."""

    def __init__(self, name: str, raw: gzip.GzipFile) -> None:
        self.name = name
        self.raw = raw

    def read(self, n: int = -1) -> bytes:
        try:
            return self.raw.read(n)
        except gzip.BadGzipFile as err:
            raise SourceFormatError(
                f"{self.name}: not gzip data ({err}); if the file is plain text, remove the .gz "
                "suffix"
            ) from None
        except (EOFError, zlib.error) as err:
            # EOFError would otherwise reach click, which turns it into a bare "Aborted!".
            raise SourceFormatError(
                f"{self.name}: the gzip data is truncated or damaged ({err}); copy the file again"
            ) from None

    def close(self) -> None:
        self.raw.close()
