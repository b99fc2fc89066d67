"""Progress bars for the CLI: rich on a terminal, nothing otherwise."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any


def interactive() -> bool:
    return sys.stderr.isatty()


@contextmanager
def bar(
    description: str, total: float | None, *, unit: str = "rows", bytes_mode: bool = False
) -> Iterator[Any]:
    """Yield ``update(completed, total=None, **fields)``; a no-op when stderr is not a terminal."""
    if not interactive():
        yield lambda *a, **k: None
        return
    from rich.progress import (
        BarColumn,
        DownloadColumn,
        Progress,
        TaskProgressColumn,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
        TransferSpeedColumn,
    )

    columns: list[Any] = [TextColumn("[bold]{task.description}"), BarColumn(), TaskProgressColumn()]
    if bytes_mode:
        columns += [DownloadColumn(), TransferSpeedColumn()]
    columns += [
        TextColumn("{task.fields[info]}"),
        TimeElapsedColumn(),
        TextColumn("ETA"),
        TimeRemainingColumn(),
    ]
    from rich.console import Console

    # stderr, the stream checked above: stdout stays clean for --json and pipes.
    with Progress(
        *columns, console=Console(stderr=True), transient=False, refresh_per_second=5
    ) as progress:
        task = progress.add_task(description, total=total, info="")

        def update(completed: float, total: float | None = None, **fields: Any) -> None:
            if total is not None:
                progress.update(task, total=total)
            progress.update(task, completed=completed, **fields)

        try:
            yield update
        except BaseException:
            # Ctrl-C or an error: the bar is erased, so the one line that follows stands alone.
            progress.live.transient = True
            raise
