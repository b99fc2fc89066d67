"""The ``chunkfit`` command: a thin typer layer over the library.

Each command parses its flags, calls one library function and turns a ``ChunkfitError`` into one
line on stderr and a non-zero exit. Any other exception is a bug and keeps its traceback.
"""

from __future__ import annotations

import os
import sys

import typer

app = typer.Typer(
    name="chunkfit",
    help="Train Keras models on sensor signals far larger than memory.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _register() -> None:
    # Each command lives in its own module and adds itself to ``app`` on import.
    from . import commands  # noqa: F401


def main(argv: list[str] | None = None) -> None:
    """Console-script entry point."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    _register()
    from ..errors import ChunkfitError

    try:
        app(args=argv, standalone_mode=False)
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
        import click

        if isinstance(err, click.exceptions.ClickException):
            err.show()
            sys.exit(err.exit_code)
        raise
