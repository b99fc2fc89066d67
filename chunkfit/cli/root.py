"""The ``chunkfit`` Typer app and its global options; each command module adds itself to it."""

from __future__ import annotations

import os

import typer

app = typer.Typer(
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
        False, "--anon", help="Read s3:// stores and runs of public buckets without credentials"
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
        help="Print chunkfit's version and exit",
    ),
) -> None:
    """Train Keras models on sensor signals far larger than memory."""
    if backend is not None:
        from ..train.backend import use_backend

        use_backend(backend)
    if anon:
        os.environ["CHUNKFIT_S3_ANON"] = "1"  # chunkfit.store.s3client.anonymous
