"""BinaryMetrics against brute-force computations on small random data."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scoring_support import exact_average_precision, exact_roc_auc

from chunkfit.core.metrics import BinaryMetrics


@st.composite
def labelled_scores(
    draw: st.DrawFn, grid: bool = False
) -> tuple[np.ndarray, np.ndarray, list[int]]:
    """(positive flags, scores, cut points splitting them into updates), both classes present.

    With ``grid`` the scores are multiples of 1/1000, so equal scores are the only ties; otherwise
    they are arbitrary float32 values in [0, 1].
    """
    n = draw(st.integers(2, 300))
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    positive = rng.random(n) < draw(st.floats(0.05, 0.95))
    positive[:2] = [True, False]
    if grid:
        scores = (rng.integers(0, 1001, n) / 1000).astype(np.float32)
    else:
        # events score higher on average, so the curves are not trivial
        scores = np.clip(rng.normal(0.5 + 0.2 * (positive - 0.5), 0.2), 0, 1).astype(np.float32)
    cuts = sorted(draw(st.lists(st.integers(0, n), max_size=4)))
    return positive, scores, cuts


def accumulate(
    positive: np.ndarray, scores: np.ndarray, cuts: list[int], threshold: float = 0.5
) -> BinaryMetrics:
    m = BinaryMetrics(threshold=threshold)
    for a, b in zip([0, *cuts], [*cuts, positive.size], strict=True):
        m.update(positive[a:b], scores[a:b])
    return m


@given(labelled_scores(), st.floats(0.0, 1.0))
@settings(max_examples=60, deadline=None)
def test_confusion_counts_equal_counting_every_window(
    data: tuple[np.ndarray, np.ndarray, list[int]], threshold: float
) -> None:
    positive, scores, cuts = data
    predicted = scores.astype(np.float64) >= threshold
    result = accumulate(positive, scores, cuts, threshold).result()
    assert result["confusion"] == {
        "tn": int(np.sum(~positive & ~predicted)),
        "fp": int(np.sum(~positive & predicted)),
        "fn": int(np.sum(positive & ~predicted)),
        "tp": int(np.sum(positive & predicted)),
    }


@given(labelled_scores(), st.floats(0.0, 1.0))
@settings(max_examples=60, deadline=None)
def test_accuracy_precision_recall_and_f1_equal_their_definitions(
    data: tuple[np.ndarray, np.ndarray, list[int]], threshold: float
) -> None:
    positive, scores, cuts = data
    predicted = scores.astype(np.float64) >= threshold
    tp = int(np.sum(positive & predicted))
    precision = tp / predicted.sum() if predicted.any() else math.nan
    recall = tp / positive.sum()
    f1 = 2 * tp / (predicted.sum() + positive.sum())
    result = accumulate(positive, scores, cuts, threshold).result()
    expected = {
        "accuracy": np.mean(positive == predicted),
        "precision": precision,
        "recall": recall,
        "f1": f1,
    }
    assert {k: result[k] for k in expected} == pytest.approx(expected, rel=1e-12, nan_ok=True)


@given(labelled_scores(grid=True))
@settings(max_examples=60, deadline=None)
def test_roc_auc_equals_the_pairwise_auc_when_only_equal_scores_share_a_bin(
    data: tuple[np.ndarray, np.ndarray, list[int]],
) -> None:
    positive, scores, cuts = data
    assert accumulate(positive, scores, cuts).roc_auc() == pytest.approx(
        exact_roc_auc(positive, scores), abs=1e-12
    )


@given(labelled_scores(grid=True))
@settings(max_examples=60, deadline=None)
def test_pr_auc_equals_the_average_precision_when_only_equal_scores_share_a_bin(
    data: tuple[np.ndarray, np.ndarray, list[int]],
) -> None:
    positive, scores, cuts = data
    expected = exact_average_precision(positive, scores)
    assert accumulate(positive, scores, cuts).pr_auc() == pytest.approx(expected, abs=1e-12)


def binned(scores: np.ndarray, bins: int = 100_000) -> np.ndarray:
    """The bin each score falls in, as BinaryMetrics documents its histograms (equal width on
    [0, 1])."""
    s = np.clip(scores.astype(np.float64), 0.0, 1.0)
    return np.minimum((s * bins).astype(np.int64), bins - 1)


@given(labelled_scores())
@settings(max_examples=60, deadline=None)
def test_roc_auc_of_arbitrary_scores_is_the_pairwise_auc_of_their_bins(
    data: tuple[np.ndarray, np.ndarray, list[int]],
) -> None:
    positive, scores, cuts = data
    expected = exact_roc_auc(positive, binned(scores))
    assert accumulate(positive, scores, cuts).roc_auc() == pytest.approx(expected, abs=1e-12)


@given(labelled_scores())
@settings(max_examples=60, deadline=None)
def test_pr_auc_of_arbitrary_scores_is_the_average_precision_of_their_bins(
    data: tuple[np.ndarray, np.ndarray, list[int]],
) -> None:
    positive, scores, cuts = data
    expected = exact_average_precision(positive, binned(scores))
    assert accumulate(positive, scores, cuts).pr_auc() == pytest.approx(expected, abs=1e-12)


@given(labelled_scores())
@settings(max_examples=60, deadline=None)
def test_roc_auc_differs_from_the_pairwise_auc_by_at_most_half_the_pairs_sharing_a_bin(
    data: tuple[np.ndarray, np.ndarray, list[int]],
) -> None:
    positive, scores, cuts = data
    p, n = scores[positive].astype(np.float64), scores[~positive].astype(np.float64)
    shared = (binned(scores[positive])[:, None] == binned(scores[~positive])[None, :]) & (
        p[:, None] != n[None, :]
    )
    bound = 0.5 * shared.sum() / shared.size
    assert (
        abs(accumulate(positive, scores, cuts).roc_auc() - exact_roc_auc(positive, scores))
        <= bound + 1e-12
    )


@pytest.mark.parametrize("rate", [0.5, 0.01])
def test_pr_and_roc_auc_of_a_realistic_score_spread_are_within_1e4_of_the_exact_figures(
    rate: float,
) -> None:
    rng = np.random.default_rng(20)
    positive = rng.random(200_000) < rate
    scores = np.where(
        positive, rng.beta(5, 2, positive.size), rng.beta(2, 5, positive.size)
    ).astype(np.float32)
    m = accumulate(positive, scores, [50_000, 120_000])
    assert m.pr_auc() == pytest.approx(exact_average_precision(positive, scores), abs=1e-4)
    assert m.roc_auc() == pytest.approx(exact_roc_auc_sorted(positive, scores), abs=1e-4)


def exact_roc_auc_sorted(positive: np.ndarray, scores: np.ndarray) -> float:
    """The pairwise AUC by ranks (Mann-Whitney), for samples too large for all pairs; ties count one
    half."""
    s = scores.astype(np.float64)
    order = np.argsort(s, kind="stable")
    ranks = np.empty(s.size, dtype=np.float64)
    sorted_s = s[order]
    first = np.r_[0, np.flatnonzero(np.diff(sorted_s) != 0) + 1]
    last = np.r_[first[1:], s.size]
    ranks[order] = np.repeat(
        (first + last + 1) / 2.0, last - first
    )  # mean 1-based rank of each tie
    n_pos, n_neg = int(positive.sum()), int((~positive).sum())
    return float((ranks[positive].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg))


def test_loss_is_the_mean_of_the_per_window_losses() -> None:
    m = BinaryMetrics()
    m.update(np.array([1, 0]), np.array([0.9, 0.2]), np.array([0.5, 1.5]))
    m.update(np.array([1]), np.array([0.4]), np.array([4.0]))
    assert m.result()["loss"] == pytest.approx(2.0)


def test_result_counts_every_window_of_every_update() -> None:
    m = BinaryMetrics()
    m.update(np.array([1, 0, 0]), np.array([0.9, 0.2, 0.1]))
    m.update(np.array([1]), np.array([0.4]))
    assert m.result()["windows"] == 4


@pytest.mark.parametrize("figure", ["roc_auc", "pr_auc", "precision", "recall"])
def test_figures_without_any_event_window_are_nan(figure: str) -> None:
    m = BinaryMetrics()
    m.update(np.zeros(5, dtype=bool), np.array([0.1, 0.2, 0.3, 0.2, 0.1]))
    assert math.isnan(m.result()[figure])


def test_f1_is_zero_when_events_exist_and_none_is_found() -> None:
    m = BinaryMetrics()
    m.update(np.array([1, 0, 1]), np.array([0.1, 0.2, 0.3]))
    assert m.result()["f1"] == 0.0


def test_perfect_separation_gives_both_areas_one() -> None:
    m = BinaryMetrics()
    m.update(np.array([1, 1, 0, 0]), np.array([0.99, 0.8, 0.3, 0.01]))
    assert (m.roc_auc(), m.pr_auc()) == (1.0, 1.0)


def test_roc_auc_stays_right_with_billions_of_windows_per_bin() -> None:
    # A store far larger than memory may put billions of windows in one bin: the pair counts
    # (events x non-events) exceed int64.
    m = BinaryMetrics()
    m.pos_hist[-1] = 5_000_000_000
    m.neg_hist[0] = 5_000_000_000
    m.neg_hist[-1] = 1_000_000_000
    assert m.roc_auc() == pytest.approx((5 / 6) + 0.5 * (1 / 6))


def test_precision_recall_curve_has_no_point_where_no_window_is_predicted_positive() -> None:
    m = BinaryMetrics()
    m.update(np.array([1, 0, 1, 0]), np.array([0.6, 0.4, 0.55, 0.45]))
    recall, precision = m.pr_curve()
    assert not np.any((recall == 0) & (precision == 0))


def test_result_is_plain_json() -> None:
    m = BinaryMetrics()
    m.update(np.array([1, 0, 1, 0]), np.array([0.6, 0.4, 0.55, 0.45]), np.ones(4))
    assert json.loads(json.dumps(m.result(), allow_nan=False)) == m.result()


def brute_threshold_figures(
    positive: np.ndarray, scores: np.ndarray, t: float
) -> tuple[float, float, float]:
    """(precision, recall, F1) of the event class when windows scoring at least ``t`` are
    positive."""
    predicted = binned(scores) >= round(t * 100_000)
    tp = int(np.sum(positive & predicted))
    precision = tp / predicted.sum() if predicted.any() else 0.0
    recall = tp / positive.sum()
    return precision, recall, 2 * tp / (predicted.sum() + positive.sum())


@given(labelled_scores(grid=True))
@settings(max_examples=40, deadline=None)
def test_the_f1_threshold_has_the_best_f1_of_every_threshold(
    data: tuple[np.ndarray, np.ndarray, list[int]],
) -> None:
    positive, scores, cuts = data
    chosen = accumulate(positive, scores, cuts).choose_threshold("f1")
    candidates = np.unique(binned(scores)) / 100_000
    best = max(brute_threshold_figures(positive, scores, t)[2] for t in candidates)
    assert chosen["f1"] == pytest.approx(best, abs=1e-12)
    assert brute_threshold_figures(positive, scores, chosen["value"]) == pytest.approx(
        (chosen["precision"], chosen["recall"], chosen["f1"]), abs=1e-12
    )


@given(labelled_scores(grid=True), st.sampled_from([0.5, 0.9, 1.0]))
@settings(max_examples=40, deadline=None)
def test_the_recall_threshold_is_the_highest_that_reaches_the_recall(
    data: tuple[np.ndarray, np.ndarray, list[int]], target: float
) -> None:
    positive, scores, cuts = data
    chosen = accumulate(positive, scores, cuts).choose_threshold(f"recall={target}")
    assert brute_threshold_figures(positive, scores, chosen["value"])[1] >= target
    higher = chosen["value"] + 1e-5
    assert brute_threshold_figures(positive, scores, higher)[1] < target
