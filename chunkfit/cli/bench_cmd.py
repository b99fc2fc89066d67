"""``chunkfit bench``."""

from __future__ import annotations

import json
from typing import Annotated

import typer

from .progress import bar, interactive
from .root import Command, app


@app.command(cls=Command)
def bench(
    samples: Annotated[
        int, typer.Option(help="Signal length N of the synthetic problem")
    ] = 262_144,
    window: Annotated[int, typer.Option(help="Samples per window")] = 104,
    batch_size: Annotated[int, typer.Option(help="Windows per training step")] = 128,
    epochs: Annotated[int, typer.Option(help="Epochs per strategy")] = 1,
    strategies: Annotated[
        str | None,
        typer.Option(
            help=(
                "Comma-separated subset; NAME:CANDIDATE runs one anchor candidate, e.g. "
                "anchor-tensorflow:spe32-xla [default: all; those on JAX where jax is installed]"
            )
        ),
    ] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print one JSON object")] = False,
    plot: Annotated[
        str | None, typer.Option(help="Write a bar chart of windows/s to this PNG")
    ] = None,
) -> None:
    """The original question's comparison on this machine: materialised fit, PyDataset,
    train_on_batch, timeseries_dataset_from_array, Keras on JAX, the tuned anchor (model.fit with
    steps_per_execution 1/32/256, XLA off/on), chunkfit and the compute ceilings, each in its own
    subprocess (seconds, windows/s, ratios to the reference, the tuned anchor and the ceiling,
    GFLOP/s and share of the CPU's peak, CPU use, peak RSS, final loss)."""
    from ..bench import BenchSpec, default_strategies, format_table
    from ..bench import bench as run_bench

    spec = BenchSpec(samples=samples, window=window, batch_size=batch_size, epochs=epochs)
    chosen = tuple(s.strip() for s in strategies.split(",")) if strategies else default_strategies()
    with bar("bench", len(chosen), unit="strategies") as update:

        def starting(k: int, n: int, name: str) -> None:
            update(k, info=name)
            if not interactive():  # on a terminal the bar names it
                typer.echo(f"bench: strategy {k + 1}/{n}: {name}", err=True)

        result = run_bench(spec, chosen, progress=starting, plot_path=plot)
    if json_out:
        typer.echo(json.dumps(result, indent=2))
    else:
        typer.echo(format_table(result))
        if plot is not None:
            typer.echo(f"\nplot: {plot}")
