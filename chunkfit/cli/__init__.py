"""The ``chunkfit`` command: a thin typer layer over the library.

Each command parses its flags, calls one library function and turns a ``ChunkfitError`` into one
line on stderr and a non-zero exit. Any other exception is a bug and keeps its traceback.
"""

from __future__ import annotations

import os
import sys

import typer

from .root import app as app
from .root import global_options_first


def _register() -> None:
    # Each command lives in its own module and adds itself to ``app`` on import.
    from . import commands  # noqa: F401


def main(argv: list[str] | None = None) -> None:
    """Console-script entry point."""
    from .._quiet import QUIET_LOG_LEVEL, install

    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", QUIET_LOG_LEVEL)
    install()  # TensorFlow stays unimported until a command needs it, then starts quietly
    # Reads from an object store cut short (the endpoint gone) leave tasks on zarr's event loop
    # whose errors asyncio logs at exit, after chunkfit's one line has said it all.
    import logging

    logging.getLogger("asyncio").setLevel(logging.CRITICAL)
    _register()
    from ..errors import ChunkfitError, Interrupted
    from .interrupt import interrupted, redeliver_swallowed, remember, watch

    remember(argv)
    watch()
    redeliver_swallowed()
    try:
        # Out of standalone mode typer returns the code of a ``typer.Exit`` (and the 130 it makes
        # of a ``KeyboardInterrupt`` outside ``interrupt.keeps``) instead of raising it.
        code = app(
            args=global_options_first(sys.argv[1:] if argv is None else argv), standalone_mode=False
        )
    except Interrupted as err:
        print(f"chunkfit: interrupted: {err}", file=sys.stderr)
        sys.exit(err.exit_code)
    except ChunkfitError as err:
        print(f"chunkfit: error: {err}", file=sys.stderr)
        sys.exit(err.exit_code)
    except KeyboardInterrupt:
        print("chunkfit: interrupted", file=sys.stderr)
        sys.exit(130)
    except BrokenPipeError:
        sys.exit(141)
    except typer.Exit as ex:
        sys.exit(ex.exit_code)
    except typer.Abort:
        print("chunkfit: aborted", file=sys.stderr)
        sys.exit(1)
    except Exception as err:
        if interrupted():  # Ctrl-C that native code turned into another error
            print("chunkfit: interrupted", file=sys.stderr)
            sys.exit(130)
        if isinstance(err, _click_exception()):
            # Bad flags are a user's mistake too: one line, exit 2, no usage block.
            message = " ".join(err.format_message().split())  # type: ignore[attr-defined]
            print(f"chunkfit: error: {message} (see chunkfit --help)", file=sys.stderr)
            sys.exit(2)
        raise
    if code == 130:
        print("chunkfit: interrupted", file=sys.stderr)
    if isinstance(code, int) and code:
        sys.exit(code)


def _click_exception() -> type[Exception]:
    import importlib

    try:
        exceptions = importlib.import_module(
            "typer._click.exceptions"
        )  # typer >= 0.29 vendors click
    except ImportError:
        exceptions = importlib.import_module("click.exceptions")
    return exceptions.ClickException
