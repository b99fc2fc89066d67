"""The public surface stays as it is: every CLI command with its arguments and options, the global
options, and ``chunkfit.__all__``. A change here is a change for users: say it in CHANGELOG.md."""

from __future__ import annotations

import typer.main

import chunkfit
from chunkfit import cli

COMMANDS: dict[str, list[str]] = {
    "bench": [
        "--batch-size",
        "--epochs",
        "--json",
        "--plot",
        "--samples",
        "--strategies",
        "--window",
    ],
    "evaluate": [
        "--batch-size",
        "--channels",
        "--chunk",
        "--json",
        "--match",
        "--plot",
        "--split",
        "--threshold",
        "--tolerance",
        "--unsafe",
        "run",
        "store",
    ],
    "export": [
        "--format",
        "--json",
        "--out",
        "--overwrite",
        "--quantize",
        "--store",
        "--unsafe",
        "run",
    ],
    "info": ["--json", "store"],
    "ingest": [
        "--annotations",
        "--append",
        "--chunk-samples",
        "--codec",
        "--columns",
        "--commit-every",
        "--delimiter",
        "--events",
        "--header",
        "--json",
        "--label-column",
        "--label-from-annotations",
        "--names",
        "--nan",
        "--rate",
        "--repair",
        "--symbols",
        "--time-column",
        "sources",
        "store",
    ],
    "launch": ["--workers"],
    "predict": [
        "--batch-size",
        "--channels",
        "--chunk",
        "--events-out",
        "--follow",
        "--idle",
        "--merge-gap",
        "--min-duration",
        "--out",
        "--overwrite",
        "--threshold",
        "--unsafe",
        "run",
        "store",
    ],
    "synth": ["--anomalies", "--bump", "--offset", "--samples", "--scale", "--seed", "store"],
    "train": [
        "--augment",
        "--batch-size",
        "--checkpoint-every",
        "--chunk",
        "--class-weight",
        "--cluster-timeout",
        "--compute-threads",
        "--deterministic",
        "--devices",
        "--epochs",
        "--fail-under",
        "--jax-loop",
        "--jit",
        "--label",
        "--label-margin",
        "--loss",
        "--lr",
        "--match",
        "--memory-budget",
        "--mix",
        "--model",
        "--normalize",
        "--optimizer",
        "--out",
        "--oversample",
        "--pick-width",
        "--precision",
        "--restart",
        "--resume",
        "--seed",
        "--steps-per-execution",
        "--stride",
        "--tensorboard",
        "--threshold-for",
        "--tolerance",
        "--unsafe",
        "--validation",
        "--validation-segments",
        "--verbose",
        "--window",
        "store",
    ],
}

GLOBAL_OPTIONS = ["--anon", "--backend", "--version"]

PUBLIC_NAMES = [
    "AugmentSpec",
    "BenchSpec",
    "BlockSpec",
    "ChunkfitError",
    "FitOptions",
    "FollowOptions",
    "FollowReport",
    "IngestOptions",
    "IngestReport",
    "PredictReport",
    "SplitSpec",
    "Store",
    "StoreWriter",
    "SynthSpec",
    "TrainProgress",
    "WindowSpec",
    "bench",
    "blocks",
    "build_model",
    "dataset",
    "errors",
    "evaluate",
    "fit",
    "follow",
    "ingest",
    "open_store",
    "predict",
    "synth",
]


def _app_command():
    cli._register()
    return typer.main.get_command(cli.app)


def test_the_cli_has_exactly_its_commands():
    assert sorted(_app_command().commands) == sorted(COMMANDS)


def test_each_command_keeps_its_arguments_and_options():
    commands = _app_command().commands
    found = {
        name: sorted(
            o
            for p in commands[name].params
            for o in (p.opts if p.param_type_name == "option" else [p.name])
        )
        for name in COMMANDS
    }
    assert found == COMMANDS


def test_the_global_options_stay():
    assert sorted(o for p in _app_command().params for o in p.opts) == GLOBAL_OPTIONS


def test_the_public_api_is_unchanged():
    assert sorted(chunkfit.__all__) == PUBLIC_NAMES


def test_every_public_name_resolves():
    missing = [name for name in PUBLIC_NAMES if getattr(chunkfit, name, None) is None]
    assert missing == []
