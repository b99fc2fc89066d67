"""The ``chunkfit`` Typer app and its global options; each command module adds itself to it."""

from __future__ import annotations

import os
from typing import Any

import typer
from typer.core import TyperCommand, TyperGroup


def _as_flags(params: list[Any]) -> list[Any]:
    """Flags (``--help``, ``--json``, ``--unsafe`` ...) shown as the flags they are: Typer renders
    an option without a metavar with its type label, ``<bool>`` (Typer's own click, hence
    ``Any``)."""
    for param in params:
        if getattr(param, "is_flag", False) and param.metavar is None:
            param.metavar = ""
    return params


class Group(TyperGroup):
    """The app's group: its help shows flags as flags."""

    def get_params(self, ctx: Any) -> Any:
        return _as_flags(super().get_params(ctx))


class Command(TyperCommand):
    """Every command's class (``@app.command(cls=Command)``): its help shows flags as flags."""

    def get_params(self, ctx: Any) -> Any:
        return _as_flags(super().get_params(ctx))


app = typer.Typer(
    cls=Group,
    name="chunkfit",
    help="Train Keras models on sensor signals far larger than memory.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _version(value: bool) -> None:
    if value:
        from .._version import __version__

        typer.echo(f"chunkfit {__version__}")
        raise typer.Exit()


@app.callback()
def _options(
    anon: bool = typer.Option(
        False,
        "--anon",
        metavar="",
        help="Read s3:// stores and runs of public buckets without credentials",
    ),
    backend: str = typer.Option(
        None,
        "--backend",
        help="Keras backend to train and score on: tensorflow or jax [default: KERAS_BACKEND, else "
        "Keras's keras.json, else tensorflow]",
    ),
    version: bool = typer.Option(
        False,
        "--version",
        callback=_version,
        is_eager=True,
        metavar="",
        help="Print chunkfit's version and exit",
    ),
) -> None:
    """Train Keras models on sensor signals far larger than memory."""
    if backend is not None:
        from ..train.backend import use_backend

        use_backend(backend)
    if anon:
        os.environ["CHUNKFIT_S3_ANON"] = "1"  # chunkfit.store.s3client.anonymous


_FLAGS = ("--anon",)
_VALUED = ("--backend",)


def global_options_first(args: list[str]) -> list[str]:
    """``chunkfit train S --backend jax`` read as ``chunkfit --backend jax train S``: a global
    option given after the command is moved before it (never past ``--``, never for ``launch``,
    whose arguments are its workers')."""
    at = next(
        (
            i
            for i, a in enumerate(args)
            if not a.startswith("-") and (i == 0 or args[i - 1] not in _VALUED)
        ),
        None,
    )
    if at is None or args[at] == "launch":
        return list(args)
    moved: list[str] = []
    rest: list[str] = []
    tail = args[at + 1 :]
    i = 0
    while i < len(tail):
        a = tail[i]
        if a == "--":
            rest += tail[i:]
            break
        if a in _FLAGS or a.startswith(tuple(f"{v}=" for v in _VALUED)):
            moved.append(a)
        elif a in _VALUED and i + 1 < len(tail):
            moved += tail[i : i + 2]
            i += 1
        else:
            rest.append(a)
        i += 1
    return [*args[:at], *moved, args[at], *rest]
