"""``chunkfit bench`` on a tiny problem: the JSON's shape, the plot, and refused settings."""

from __future__ import annotations

import json
import math
import subprocess
from pathlib import Path
from typing import Any

import pytest
from support import run_cli

from chunkfit.bench import BenchSpec, bench, jobs
from chunkfit.errors import RunError, UsageError

pytestmark = pytest.mark.slow

STRATEGIES = [
    "materialised",
    "jax",
    "anchor-tensorflow:spe32-xla",
    "anchor-jax:spe1-xla",
    "chunkfit",
    "chunkfit-jax",
    "ceiling",
    "ceiling-xla",
    "ceiling-jax",
    "ceiling-jax-scan",
]
ANCHOR_ROWS = ["anchor-tensorflow:spe32-xla", "anchor-jax:spe1-xla"]
CEILINGS = ["ceiling", "ceiling-xla", "ceiling-jax", "ceiling-jax-scan"]
FIELDS = [
    "strategy",
    "candidate",
    "backend",
    "seconds",
    "windows",
    "windows_per_s",
    "cpu_utilisation",
    "peak_rss_bytes",
    "final_loss",
    "setup_seconds",
    "flops_per_window",
    "ratio_to_reference",
    "ratio_to_tuned_anchor",
    "ratio_to_ceiling",
    "gflop_per_s",
    "peak_share",
]


@pytest.fixture(scope="module")
def tiny(
    tmp_path_factory: pytest.TempPathFactory,
) -> tuple[subprocess.CompletedProcess[str], dict[str, Any], Path]:
    """One bench run of ten strategies (one candidate of each tuned anchor) on 3,000 samples, with
    --json and --plot."""
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
        timeout=2400,  # a guard: a 2-core machine under heavy load took over 20 minutes
    )
    assert result.returncode == 0, result.stderr
    return result, json.loads(result.stdout), plot


def test_bench_names_each_strategy_before_it_runs(tiny: tuple[Any, dict[str, Any], Path]) -> None:
    said = [line for line in tiny[0].stderr.splitlines() if line.startswith("bench: ")]
    assert said == [
        f"bench: strategy {k}/{len(STRATEGIES)}: {name}" for k, name in enumerate(STRATEGIES, 1)
    ]


def row_name(row: dict[str, Any]) -> str:
    return f"{row['strategy']}:{row['candidate']}" if row["candidate"] else row["strategy"]


def test_rows_are_the_chosen_strategies_in_order(tiny: tuple[Any, dict[str, Any], Path]) -> None:
    assert [row_name(row) for row in tiny[1]["rows"]] == STRATEGIES


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_every_row_has_every_field(tiny: tuple[Any, dict[str, Any], Path], strategy: str) -> None:
    row = next(r for r in tiny[1]["rows"] if row_name(r) == strategy)
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
        "ratio_to_tuned_anchor",
        "ratio_to_ceiling",
        "gflop_per_s",
        "peak_share",
    ],
)
def test_measured_figures_are_positive_numbers(
    tiny: tuple[Any, dict[str, Any], Path], strategy: str, field: str
) -> None:
    row = next(r for r in tiny[1]["rows"] if row_name(r) == strategy)
    assert isinstance(row[field], (int, float)) and math.isfinite(row[field]) and row[field] > 0


@pytest.mark.parametrize("strategy", [s for s in STRATEGIES if s not in ANCHOR_ROWS])
def test_every_strategy_trains_every_window_once_per_epoch(
    tiny: tuple[Any, dict[str, Any], Path], strategy: str
) -> None:
    row = next(r for r in tiny[1]["rows"] if row_name(r) == strategy)
    assert row["windows"] == 3000 - 104 + 1


def test_reference_runs_at_ratio_one(tiny: tuple[Any, dict[str, Any], Path]) -> None:
    assert tiny[1]["rows"][0]["ratio_to_reference"] == 1.0


def test_the_jax_rows_train_on_the_jax_backend_and_the_rest_on_tensorflow(
    tiny: tuple[Any, dict[str, Any], Path],
) -> None:
    assert {row_name(r): r["backend"] for r in tiny[1]["rows"]} == {
        s: "jax" if "jax" in s else "tensorflow" for s in STRATEGIES
    }


@pytest.mark.parametrize("strategy", ANCHOR_ROWS)
def test_an_anchor_candidate_times_at_most_one_epoch(
    tiny: tuple[Any, dict[str, Any], Path], strategy: str
) -> None:
    row = next(r for r in tiny[1]["rows"] if row_name(r) == strategy)
    assert 0 < row["windows"] <= 3000 - 104 + 1


def test_the_tuned_anchor_is_the_fastest_anchor_candidate(
    tiny: tuple[Any, dict[str, Any], Path],
) -> None:
    rows = {row_name(r): r for r in tiny[1]["rows"]}
    best = max(ANCHOR_ROWS, key=lambda s: rows[s]["windows_per_s"])
    assert tiny[1]["tuned_anchor"] == best.replace(":", " ")


def test_ratios_to_the_tuned_anchor_divide_by_its_speed(
    tiny: tuple[Any, dict[str, Any], Path],
) -> None:
    rows = {row_name(r): r for r in tiny[1]["rows"]}
    best = max(rows[s]["windows_per_s"] for s in ANCHOR_ROWS)
    assert [r["ratio_to_tuned_anchor"] for r in rows.values()] == pytest.approx(
        [r["windows_per_s"] / best for r in rows.values()], rel=1e-12
    )


def test_the_ceiling_is_the_fastest_ceiling_of_either_engine(
    tiny: tuple[Any, dict[str, Any], Path],
) -> None:
    rows = {row_name(r): r for r in tiny[1]["rows"]}
    assert tiny[1]["ceiling"] == max(CEILINGS, key=lambda s: rows[s]["windows_per_s"])


def test_ratios_to_the_ceiling_divide_by_its_speed(tiny: tuple[Any, dict[str, Any], Path]) -> None:
    rows = {row_name(r): r for r in tiny[1]["rows"]}
    best = max(rows[s]["windows_per_s"] for s in CEILINGS)
    assert [r["ratio_to_ceiling"] for r in rows.values()] == pytest.approx(
        [r["windows_per_s"] / best for r in rows.values()], rel=1e-12
    )


def test_flops_per_window_is_baseline_cnns_hand_count(
    tiny: tuple[Any, dict[str, Any], Path],
) -> None:
    """3 x 2 x (96 x 24 x 9 + 576 x 20 + 20 x 2) multiply-adds (chunkfit.bench.flops)."""
    assert {r["flops_per_window"] for r in tiny[1]["rows"]} == {193_776}


def test_gflops_are_windows_per_second_times_flops_per_window(
    tiny: tuple[Any, dict[str, Any], Path],
) -> None:
    rows = tiny[1]["rows"]
    assert [r["gflop_per_s"] for r in rows] == pytest.approx(
        [r["windows_per_s"] * 193_776 / 1e9 for r in rows], rel=1e-12
    )


def test_peak_share_is_gflops_over_the_cpu_peak(tiny: tuple[Any, dict[str, Any], Path]) -> None:
    peak = tiny[1]["cpu_peak"]["gflops"]
    assert [r["peak_share"] for r in tiny[1]["rows"]] == pytest.approx(
        [r["gflop_per_s"] / peak for r in tiny[1]["rows"]], rel=1e-12
    )


def test_table_shows_each_anchor_candidate_as_a_row(
    tiny: tuple[Any, dict[str, Any], Path],
) -> None:
    """The table (not --json) of the same result names the candidate beside its strategy."""
    from chunkfit.bench import format_table

    names = [line.split(" | ")[0].lstrip("| ") for line in format_table(tiny[1]).splitlines()]
    assert {"anchor-tensorflow spe32-xla", "anchor-jax spe1-xla"} <= set(names)


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


def test_a_tensorflow_anchor_runs_each_steps_per_execution_with_xla_off_then_on() -> None:
    assert jobs("anchor-tensorflow") == [
        ("anchor-tensorflow", key)
        for key in ("spe1", "spe32", "spe256", "spe1-xla", "spe32-xla", "spe256-xla")
    ]


def test_a_jax_anchor_runs_each_steps_per_execution_compiled() -> None:
    assert jobs("anchor-jax") == [
        ("anchor-jax", key) for key in ("spe1-xla", "spe32-xla", "spe256-xla")
    ]


def test_a_named_candidate_runs_alone() -> None:
    assert jobs("anchor-tensorflow:spe256") == [("anchor-tensorflow", "spe256")]


def test_unknown_anchor_candidate_is_refused() -> None:
    with pytest.raises(
        UsageError, match=r"unknown candidate 'spe8' of anchor-jax \(candidates: spe1-xla, "
    ):
        jobs("anchor-jax:spe8")


def test_candidate_of_a_strategy_without_candidates_is_refused() -> None:
    with pytest.raises(UsageError, match=r"strategy ceiling has no candidates"):
        jobs("ceiling:spe1")


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
