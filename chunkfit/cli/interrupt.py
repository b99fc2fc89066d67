"""Ctrl-C in a command: exit 130 with one line saying what was kept.

Typer turns a ``KeyboardInterrupt`` into an exit code that ``standalone_mode=False`` returns
instead of raising, so a command wraps its work in ``keeps`` and the interruption reaches ``main``
as an ``Interrupted`` error carrying the command's own account of what is left on disk.
"""

from __future__ import annotations

import functools
import shlex
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar, cast

from ..errors import Interrupted

F = TypeVar("F", bound=Callable[..., Any])

_args: list[str] = []  # the command line, for the command that resumes an interrupted run
_sigint: list[bool] = []  # one entry once Ctrl-C has been pressed in this process


def watch() -> None:
    """Note every Ctrl-C before it raises ``KeyboardInterrupt`` as Python's own handler does.

    A ``KeyboardInterrupt`` raised while native code calls back into Python (TensorFlow's
    ``map_fn`` flattening its arguments, an import inside it) can come out as a ``SystemError`` or
    a bare ``TypeError``; with the Ctrl-C noted, such an error is still told as the interruption.
    """
    import signal

    def handler(signum: int, frame: Any) -> None:
        _sigint.append(True)
        signal.default_int_handler(signum, frame)

    signal.signal(signal.SIGINT, handler)


def interrupted() -> bool:
    """Whether Ctrl-C has been pressed since ``watch``."""
    return bool(_sigint)


def remember(argv: list[str] | None) -> None:
    """Keep the arguments ``main`` was given (``sys.argv[1:]`` when none)."""
    _args[:] = list(sys.argv[1:] if argv is None else argv)


def command_line(drop: tuple[str, ...] = (), add: tuple[str, ...] = ()) -> str:
    """``chunkfit ARGS`` as typed, without the flags in ``drop`` and with ``add`` appended."""
    return shlex.join(["chunkfit", *(a for a in _args if a not in drop), *add])


@contextmanager
def keeps(describe: Callable[[], str]) -> Iterator[None]:
    """Ctrl-C in the body raises ``Interrupted(describe())``; ``describe`` runs after the body's
    own clean-up, so it sees what was really kept."""
    try:
        yield
    except KeyboardInterrupt:
        raise Interrupted(describe()) from None
    except Interrupted:
        raise
    except Exception:
        if not interrupted():
            raise
        raise Interrupted(describe()) from None


def kept_by_run(run_dir: str | Path, epochs: int, out_defaulted: bool) -> str:
    """What an interrupted ``chunkfit train`` left in its run folder, and how to go on."""
    from ..train import checkpoint

    add = ("--out", str(run_dir)) if out_defaulted else ()
    again = command_line(drop=("--restart",), add=add)
    if not isinstance(run_dir, Path):
        return f"the run folder {run_dir} keeps its last checkpoint, if any; resume with: {again}"
    last = checkpoint.latest(run_dir)
    if last is None:
        return f"no checkpoint had been written, so nothing was kept; start again with: {again}"
    done = last.state.get("cursor", {}).get("epoch", 0)
    return (
        f"the run folder {run_dir} keeps its checkpoint ({done} of {epochs} epoch(s) done); "
        f"resume with: {again}"
    )


def outputs_kept(*params: str, note: str = "") -> Callable[[F], F]:
    """A command whose outputs (the paths in its parameters ``params``) are written under
    temporary names and renamed when complete: on Ctrl-C, say which were left as they were."""

    def wrap(command: F) -> F:
        @functools.wraps(command)
        def run(*args: Any, **kwargs: Any) -> Any:
            paths = [str(kwargs[p]) for p in params if kwargs.get(p) is not None]
            before = {p: Path(p).exists() for p in paths}
            with keeps(lambda: _outputs(before, note)):
                return command(*args, **kwargs)

        return cast(F, run)

    return wrap


def _outputs(before: dict[str, bool], note: str) -> str:
    told = [
        f"{p} left unchanged"
        if existed
        else (f"{p} written" if Path(p).exists() else f"{p} not written")
        for p, existed in before.items()
    ]
    return "; ".join([*told, *([note] if note else [])]) or "nothing was written"


def redeliver_swallowed() -> None:
    """A Ctrl-C whose ``KeyboardInterrupt`` lands in a garbage-collector callback or a ``__del__``
    (JAX registers one such callback, and TensorFlow and zarr run finalisers all the time) is
    swallowed there with an "Exception ignored" notice, and the command ran on to exit 0. Such a
    Ctrl-C is sent again from a thread, to be raised once the callback has returned."""
    import signal
    import threading

    previous = sys.unraisablehook

    def hook(unraisable: Any) -> None:
        if unraisable.exc_type is not None and issubclass(unraisable.exc_type, KeyboardInterrupt):
            threading.Timer(0.05, signal.raise_signal, (signal.SIGINT,)).start()
            return
        previous(unraisable)

    sys.unraisablehook = hook
