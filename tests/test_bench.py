"""``chunkfit bench`` on a tiny problem: the JSON's shape, the plot, and refused settings."""

from __future__ import annotations

import json
import math
import subprocess
from pathlib import Path
from typing import Any

import pytest
from support import run_cli

from chunkfit.bench import BenchSpec, bench
from chunkfit.errors import RunError, UsageError

pytestmark = pytest.mark.slow

STRATEGIES = [
    "materialised",
    "jax",
    "chunkfit",
    "chunkfit-jax",
    "ceiling",
    "ceiling-xla",
    "ceiling-jax",
    "ceiling-jax-scan",
]
FIELDS = [
    "strategy",
    "backend",
    "seconds",
    "windows",
    "windows_per_s",
    "cpu_utilisation",
    "peak_rss_bytes",
    "final_loss",
    "setup_seconds",
    "ratio_to_reference",
    "ratio_to_best_anchor",
]


@pytest.fixture(scope="module")
def tiny(
    tmp_path_factory: pytest.TempPathFactory,
) -> tuple[subprocess.CompletedProcess[str], dict[str, Any], Path]:
    """One bench run of seven strategies on 3,000 samples, with --json and --plot."""
    plot = tmp_path_factory.mktemp("bench") / "bench.png"
    result = run_cli(
        "bench",
        "--samples",
        "3000",
        "--json",
        "--strategies",
        ",".join(STRATEGIES),
        "--plot",
        plot,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    return result, json.loads(result.stdout), plot


def test_bench_names_each_strategy_before_it_runs(tiny: tuple[Any, dict[str, Any], Path]) -> None:
    said = [line for line in tiny[0].stderr.splitlines() if line.startswith("bench: ")]
    assert said == [
        f"bench: strategy {k}/{len(STRATEGIES)}: {name}" for k, name in enumerate(STRATEGIES, 1)
    ]


def test_rows_are_the_chosen_strategies_in_order(tiny: tuple[Any, dict[str, Any], Path]) -> None:
    assert [row["strategy"] for row in tiny[1]["rows"]] == STRATEGIES


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_every_row_has_every_field(tiny: tuple[Any, dict[str, Any], Path], strategy: str) -> None:
    row = next(r for r in tiny[1]["rows"] if r["strategy"] == strategy)
    assert sorted(row) == sorted(FIELDS)


@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize(
    "field",
    [
        "seconds",
        "windows_per_s",
        "cpu_utilisation",
        "peak_rss_bytes",
        "final_loss",
        "ratio_to_reference",
        "ratio_to_best_anchor",
    ],
)
def test_measured_figures_are_positive_numbers(
    tiny: tuple[Any, dict[str, Any], Path], strategy: str, field: str
) -> None:
    row = next(r for r in tiny[1]["rows"] if r["strategy"] == strategy)
    assert isinstance(row[field], (int, float)) and math.isfinite(row[field]) and row[field] > 0


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_every_strategy_trains_every_window_once_per_epoch(
    tiny: tuple[Any, dict[str, Any], Path], strategy: str
) -> None:
    row = next(r for r in tiny[1]["rows"] if r["strategy"] == strategy)
    assert row["windows"] == 3000 - 104 + 1


def test_reference_runs_at_ratio_one(tiny: tuple[Any, dict[str, Any], Path]) -> None:
    assert tiny[1]["rows"][0]["ratio_to_reference"] == 1.0


def test_the_jax_rows_train_on_the_jax_backend_and_the_rest_on_tensorflow(
    tiny: tuple[Any, dict[str, Any], Path],
) -> None:
    assert {r["strategy"]: r["backend"] for r in tiny[1]["rows"]} == {
        s: "jax" if "jax" in s else "tensorflow" for s in STRATEGIES
    }


def test_ratios_to_the_best_anchor_are_to_the_fastest_of_jax_and_the_ceilings(
    tiny: tuple[Any, dict[str, Any], Path],
) -> None:
    rows = {r["strategy"]: r for r in tiny[1]["rows"]}
    best = max(
        ("jax", "ceiling", "ceiling-xla", "ceiling-jax", "ceiling-jax-scan"),
        key=lambda s: rows[s]["windows_per_s"],
    )
    assert tiny[1]["best_anchor"] == best
    for r in rows.values():
        assert r["ratio_to_best_anchor"] == pytest.approx(
            r["windows_per_s"] / rows[best]["windows_per_s"], rel=1e-12
        )


def test_json_records_the_problem_and_the_machine(tiny: tuple[Any, dict[str, Any], Path]) -> None:
    result = tiny[1]
    assert (
        result["spec"]["samples"],
        result["spec"]["window"],
        result["spec"]["batch_size"],
        result["spec"]["epochs"],
    ) == (3000, 104, 128, 1) and result["cores"] >= 1


def test_nothing_but_the_json_and_the_strategy_lines_is_printed(
    tiny: tuple[subprocess.CompletedProcess[str], Any, Path],
) -> None:
    """stdout is parsed as one JSON object in the fixture; stderr holds only the line naming each
    strategy as it starts (off a terminal)."""
    lines = tiny[0].stderr.splitlines()
    other = [line for line in lines if not line.startswith("bench: strategy ")]
    assert other == []


def test_plot_is_written_as_a_png(tiny: tuple[Any, Any, Path]) -> None:
    assert tiny[2].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


# -- refusals -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        (
            {"samples": 200},
            r"--samples must exceed --window \+ --batch-size \(received samples=200, window=104",
        ),
        ({"window": 8}, r"--window must be at least 12, .* \(received window=8\)"),
        ({"epochs": 0}, r"--epochs must be a positive integer \(received 0\)"),
        ({"batch_size": 0}, r"--batch-size must be a positive integer \(received 0\)"),
    ],
    ids=["samples-too-few", "window-too-short", "no-epochs", "empty-batch"],
)
def test_problem_that_cannot_be_benchmarked_is_refused(
    settings: dict[str, int], message: str
) -> None:
    with pytest.raises(UsageError, match=message):
        BenchSpec(**settings)


def test_unknown_strategy_is_refused_before_any_runs() -> None:
    with pytest.raises(
        UsageError, match=r"unknown strategy 'fastest' \(strategies: materialised, pydataset"
    ):
        bench(BenchSpec(samples=3000), ("materialised", "fastest"))


def test_plot_into_a_missing_folder_is_refused_before_any_strategy_runs(tmp_path: Path) -> None:
    with pytest.raises(RunError, match="the output folder does not exist"):
        bench(
            BenchSpec(samples=3000),
            ("materialised",),
            progress=pytest.fail,
            plot_path=tmp_path / "no" / "b.png",
        )
