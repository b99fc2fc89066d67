"""Every error chunkfit raises on purpose.

A ``ChunkfitError`` is a user's mistake or a fault in their data: the CLI prints its message on one
line and exits non-zero without a traceback. Anything else is a bug and keeps its traceback.
Subclasses also inherit the matching built-in so callers can catch either.

Exit codes, one rule for every command: 2 for a usage mistake (a flag, argument or combination that
can never work, whatever the data), 1 for data that does not fit (a store, file or run that refuses
what was asked), 3 for a run that trained and was written but missed a ``--fail-under`` target,
130 for an interruption (Ctrl-C), 0 for success.
"""

from __future__ import annotations


class ChunkfitError(Exception):
    """Base class: something the user can act on. ``str(err)`` is the whole message."""

    exit_code = 1


class UsageError(ChunkfitError, ValueError):
    """A flag, argument or combination of them that cannot work."""

    exit_code = 2


class MissingExtraError(UsageError, ImportError):
    """An optional dependency that is not installed (s3, a recording format, jax, tensorboard); the
    message names the extra that installs it. A setting to fix, not data: exit 2, as a usage
    mistake."""


class Interrupted(ChunkfitError):
    """Ctrl-C ended a command; ``str(err)`` says what was kept (a checkpoint, outputs left as they
    were)."""

    exit_code = 130


class StoreNotFoundError(ChunkfitError, FileNotFoundError):
    """A store path that does not exist."""


class StoreExistsError(ChunkfitError, FileExistsError):
    """A path that would be overwritten."""


class StoreBusyError(ChunkfitError, BlockingIOError):
    """A store that another live process is appending to right now."""


class BusyError(ChunkfitError, BlockingIOError):
    """A run folder or an output that another live process is writing right now."""


class StoreFormatError(ChunkfitError, ValueError):
    """A store whose layout, attributes or arrays are malformed or damaged."""


class StoreChangedError(ChunkfitError, RuntimeError):
    """A store that was modified while a run was reading it."""


class SourceNotFoundError(ChunkfitError, FileNotFoundError):
    """An input file that does not exist."""


class SourceFormatError(ChunkfitError, ValueError):
    """An input file that cannot be parsed; the message names file, line and column."""


class IncompatibleError(ChunkfitError, ValueError):
    """Two things that must agree do not: channels on append, a model and the windows, a run and a
    store."""


class WindowError(ChunkfitError, ValueError):
    """Window, stride, chunk or split settings that do not fit the signal."""


class SettingError(UsageError, WindowError):
    """A window, stride, chunk, batch or split setting that can never work, whatever the signal
    (not positive, not a known rule): a usage mistake (exit 2) that is also a ``WindowError``."""


class ModelError(ChunkfitError, ValueError):
    """A model that cannot be built, loaded or trained on these windows."""


class RunError(ChunkfitError, OSError):
    """A run folder that cannot be written, resumed or read."""


class ReadOnlyError(ChunkfitError, PermissionError):
    """A store, run folder or output folder that cannot be written."""


class RemoteError(ChunkfitError, ConnectionError):
    """Object storage that cannot be reached (its missing client library is a
    ``MissingExtraError``)."""


class DiskFullError(ChunkfitError, OSError):
    """The disk filled up or a file-size limit was hit while writing."""


def describe_path(path: object) -> str:
    """Format a path for messages."""
    return str(path)


class WorkerLostError(ChunkfitError, ConnectionError):
    """Another worker of a multi-worker run stopped (killed, crashed, unreachable)."""


class BelowTargetError(ChunkfitError):
    """A run trained and written whose figures missed a ``--fail-under`` target, for pipelines."""

    exit_code = 3
