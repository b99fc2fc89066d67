"""``chunkfit launch``."""

from __future__ import annotations

from typing import Annotated

import typer

from .root import Command, app


@app.command(
    cls=Command, context_settings={"allow_extra_args": True, "ignore_unknown_options": True}
)
def launch(
    ctx: typer.Context,
    workers: Annotated[
        int, typer.Option(help="Worker processes to start on this machine (127.0.0.1, free ports)")
    ] = 2,
) -> None:
    """Try several workers on one machine: chunkfit launch --workers 2 -- train STORE --out RUN ...

    Starts that many chunkfit train processes, each with its own TF_CONFIG, as separate machines
    would run them; shows the chief's output. --batch-size is the global batch."""
    from ..train.launch import launch as run_launch

    code = run_launch(workers, [a for a in ctx.args if a != "--"])
    raise typer.Exit(code)
