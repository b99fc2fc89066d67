"""``chunkfit ingest``, ``chunkfit info`` and ``chunkfit synth``."""

from __future__ import annotations

import json
import math
from typing import Annotated, Any

import typer

from .interrupt import outputs_kept
from .progress import bar
from .root import Command, app


def _split(value: str | None) -> tuple[str, ...] | None:
    return tuple(v.strip() for v in value.split(",") if v.strip()) if value else None


@app.command(cls=Command)
@outputs_kept("store")
def ingest(
    store: Annotated[
        str, typer.Argument(help="Store to create (or extend with --append): DIR.zarr or FILE.h5")
    ],
    sources: Annotated[
        list[str] | None,
        typer.Argument(
            help="CSV/TSV, .npy, file.h5:/dataset, WFDB .hea, EDF/BDF, MiniSEED, Parquet, "
            "WAV/FLAC, or - for stdin (default)"
        ),
    ] = None,
    columns: Annotated[
        str | None,
        typer.Option(
            help="Channel columns, comma-separated names or 0-based positions [default: every "
            "numeric column]"
        ),
    ] = None,
    time_column: Annotated[
        str | None,
        typer.Option(
            help="Time column (seconds or ISO 8601): derives the rate and splits segments at gaps"
        ),
    ] = None,
    rate: Annotated[
        float | None, typer.Option(help="Sample rate in Hz (when there is no time column)")
    ] = None,
    events: Annotated[
        str | None, typer.Option(help="Event markers: one sample index or timestamp per line")
    ] = None,
    label_column: Annotated[
        str | None, typer.Option(help="Per-sample integer class column")
    ] = None,
    nan: Annotated[
        str, typer.Option(help="Non-finite or empty values: refuse, keep or interpolate")
    ] = "refuse",
    delimiter: Annotated[
        str | None, typer.Option(help="Field separator [default: sniffed; tab for .tsv]")
    ] = None,
    header: Annotated[
        bool | None,
        typer.Option(
            "--header/--no-header",
            help="Whether the first line names the columns [default: detected]",
        ),
    ] = None,
    names: Annotated[
        str | None,
        typer.Option(
            help="Channel names for .npy/HDF5 sources or a CSV without a header, comma-separated"
        ),
    ] = None,
    annotations: Annotated[
        str | None,
        typer.Option(
            help="Annotations to keep as events: a WFDB annotator (atr) or an EDF+ text pattern "
            '("Seizure*")'
        ),
    ] = None,
    symbols: Annotated[
        str | None,
        typer.Option(
            help="WFDB annotation symbols to keep, comma-separated (e.g. V,A) [default: all]"
        ),
    ] = None,
    label_from_annotations: Annotated[
        bool,
        typer.Option(
            "--label-from-annotations",
            help="Annotations become per-sample labels (1 inside, 0 outside) instead of events",
        ),
    ] = False,
    append: Annotated[
        bool, typer.Option("--append", help="Add the sources to an existing store as new segments")
    ] = False,
    repair: Annotated[
        bool,
        typer.Option(
            "--repair",
            help="Remove what a killed ingest left (an s3:// store's unfinished objects, an "
            "interrupted append) and exit",
        ),
    ] = False,
    chunk_samples: Annotated[int, typer.Option(help="Samples per stored chunk")] = 65_536,
    codec: Annotated[
        str, typer.Option(help="Compression: lz4 (fast), zstd (smaller) or none")
    ] = "lz4",
    commit_every: Annotated[
        float | None,
        typer.Option(
            help="Seconds between commits of a stream on standard input, so readers see the store "
            "grow (zarr stores) [default: 1; 10 on object storage]"
        ),
    ] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print the report as JSON")] = False,
) -> None:
    """Ingest sensor logs into a chunked, compressed store, in bounded memory.

    With no SOURCE (or -) it reads CSV from standard input as it arrives, so
    `tail -f sensor.log | chunkfit ingest sensor.zarr` streams a live log; Ctrl-C ends the stream
    and keeps what arrived. A failed or killed ingest leaves the store as it was; a stream from a
    pipe into a .zarr store is committed every --commit-every seconds, so a killed stream keeps what
    was committed.
    """
    from ..config import IngestOptions
    from ..ingest import IngestProgress
    from ..ingest import ingest as run_ingest

    if repair:
        from ..errors import UsageError
        from ..store.repair import repair as run_repair

        if sources or append:
            raise UsageError("--repair takes only the store: drop the sources and --append")
        typer.echo(run_repair(store))
        return
    if delimiter == "\\t":
        delimiter = "\t"
    options = IngestOptions(
        columns=_split(columns),
        time_column=time_column,
        rate=rate,
        label_column=label_column,
        events=events,
        nan=nan,
        delimiter=delimiter,
        header=header,
        names=_split(names),
        annotations=annotations,
        symbols=_split(symbols),
        label_from_annotations=label_from_annotations,
        chunk_samples=chunk_samples,
        codec=codec,
        commit_every=commit_every,
    )
    with bar("ingest", None, bytes_mode=True) as update:

        def progress(p: IngestProgress) -> None:
            update(p.bytes_read, total=p.total_bytes, info=f"{p.rows:,} rows")

        report = run_ingest(store, sources or ["-"], options, append=append, progress=progress)
    if json_out:
        typer.echo(json.dumps(report.to_dict(), indent=2))
        return
    rate_text = f" at {report.sample_rate:g} Hz" if report.sample_rate else ""
    typer.echo(
        f"{'appended' if append else 'created'} {store}: {report.samples:,} samples{rate_text}, "
        f"{report.segments} segment(s), {report.events} event(s)"
        # one source goes without saying, and the line fits a narrow terminal
        + (f" from {len(report.sources)} sources" if len(report.sources) > 1 else "")
        + f" in {report.seconds:.2f} s"
        + (" (stream ended by Ctrl-C)" if report.interrupted else "")
    )
    for note in report.notices:
        typer.echo(f"note: {note}")


def _fmt_bytes(n: float) -> str:
    for unit in ("B", "kB", "MB", "GB", "TB"):
        if n < 1000 or unit == "TB":
            return f"{n:.1f} {unit}" if unit != "B" else f"{int(n)} B"
        n /= 1000
    return str(n)


def format_info(info: dict[str, Any]) -> str:
    lines = [f"store        {info['path']} ({info['backend']})"]
    rate = info["sample_rate"]
    dur = info["duration_s"]
    lines.append(f"samples      {info['samples']:,}")
    lines.append(f"channels     {len(info['channels'])}: {', '.join(info['channels'])}")
    lines.append(f"rate         {rate:g} Hz" if rate else "rate         unknown")
    if dur is not None:
        lines.append(f"duration     {dur:,.1f} s ({dur / 3600:.2f} h)")
    lines.append(f"segments     {info['segments']}")
    starts = info.get("segment_starts") or []
    if info["segment_ranges"] is not None and any(t is not None for t in starts):
        for (a, b), t in zip(info["segment_ranges"], starts, strict=True):
            lines.append(f"             [{a}, {b}) from {t or 'unknown time'}")
    elif info["segment_ranges"] is not None and info["segments"] > 1:
        lines.append("             " + ", ".join(f"[{a}, {b})" for a, b in info["segment_ranges"]))
    elif starts and starts[0] is not None:
        lines.append(f"             the first from {starts[0]}")
    if info["events"] is not None:
        lines.append(f"events       {info['events']:,}")
    if info["label_counts"] is not None:
        lines.append(
            "labels       "
            + ", ".join(f"class {k}: {v:,}" for k, v in info["label_counts"].items())
        )
    lines.append(f"chunking     {info['chunk_samples']:,} samples per chunk")
    lines.append(f"codec        {info['codec']}")
    ratio = info["compression_ratio"]
    ratio_text = "" if math.isnan(ratio) else f", ratio {ratio:.2f}"
    lines.append(
        f"on disk      {_fmt_bytes(info['bytes_on_disk'])} "
        f"(raw {_fmt_bytes(info['bytes_uncompressed'])}{ratio_text})"
    )
    # Names are never cut (two stations' channels may share their first 12 characters).
    nw = max([12, *(len(name) for name in info["stats"])])
    lines.append(f"{'channel':<{nw}} count        mean         std          min          max")
    for name, s in info["stats"].items():
        lo = "n/a" if s["min"] is None else f"{s['min']:.6g}"
        hi = "n/a" if s["max"] is None else f"{s['max']:.6g}"
        lines.append(
            f"{name:<{nw}} {s['count']:<12,} {s['mean']:<12.6g} {s['std']:<12.6g} {lo:<12} {hi}"
        )
    lines.append(f"sources      {len(info['sources'])}")
    for src in info["sources"]:
        sha = (src.get("sha256") or "")[:12]
        lines.append(
            f"  {src['name']}  rows={src.get('rows')}  size={src.get('size')}  sha256={sha}"
        )
    return "\n".join(lines)


@app.command(cls=Command)
def info(
    store: Annotated[str, typer.Argument(help="A chunkfit store (.zarr directory or .h5 file)")],
    json_out: Annotated[bool, typer.Option("--json", help="Print one JSON object")] = False,
) -> None:
    """Describe a store: samples, channels, rate, segments, events or labels, storage and stats."""
    from ..store import open_store

    with open_store(store) as s:
        data = s.info()
    if json_out:
        typer.echo(json.dumps(data, indent=2))
    else:
        typer.echo(format_info(data))


@app.command(cls=Command)
def synth(
    store: Annotated[
        str, typer.Argument(help="New store for the original question's dummy problem")
    ],
    samples: Annotated[int, typer.Option(help="Signal length N")] = 1_049_344,
    anomalies: Annotated[
        int, typer.Option(help="Distinct anomaly positions M (stored as events)")
    ] = 50_000,
    seed: Annotated[int, typer.Option(help="Random seed")] = 0,
    bump: Annotated[float, typer.Option(help="Height of each anomaly")] = 0.5,
    scale: Annotated[
        float, typer.Option(help="Write scale * x + offset: the problem in a sensor's raw units")
    ] = 1.0,
    offset: Annotated[float, typer.Option(help="See --scale")] = 0.0,
) -> None:
    """Write x[i] = sin(i) + Normal(0, 0.2), +0.5 at M random positions, in bounded memory."""
    from ..synth import SynthSpec
    from ..synth import synth as run_synth

    spec = SynthSpec(
        samples=samples, anomalies=anomalies, seed=seed, bump=bump, scale=scale, offset=offset
    )
    with bar("synth", samples) as update:
        info_ = run_synth(store, spec, progress=lambda done, total: update(done))
    typer.echo(
        f"created {store}: {info_['samples']:,} samples, {info_['events']:,} events (seed {seed})"
    )
