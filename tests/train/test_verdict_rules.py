"""The verdict's rules (chunkfit.train.verdict) on the figures a run chose its threshold with."""

from __future__ import annotations

from typing import Any

import pytest

from chunkfit.errors import BelowTargetError, UsageError
from chunkfit.train.verdict import check_targets, parse_targets, verdict


def chosen(**figures: Any) -> dict[str, Any]:
    """A run that detects well: 40 of 42 events, 2 false alarms an hour, threshold mid-range."""
    base = {
        "value": 0.5,
        "score_range": [0.0, 1.0],
        "events": 42,
        "event_found": 40,
        "event_recall": 40 / 42,
        "event_f1": 0.95,
        "false_alarms": 2,
        "false_alarms_per_hour": 2.0,
        "tolerance_s": 0.5,
    }
    return {**base, **figures}


def test_a_run_that_detects_well_gets_no_warning() -> None:
    assert verdict(chosen(), 42) == []


def test_two_validation_events_are_too_few() -> None:
    (line,) = verdict(chosen(events=2, event_found=2, event_recall=1.0), 2)
    assert line.startswith("warning: the validation split holds 2 event(s), fewer than 3")


def test_a_threshold_at_the_bottom_of_the_scores_is_named() -> None:
    (line,) = verdict(chosen(value=0.00047, score_range=[0.0001, 0.9], event_f1=0.6), 42)
    assert line.startswith(
        "warning: the threshold 0.00047 sits at the bottom of the validation scores (0.0001 to 0.9)"
    )


def test_a_threshold_at_the_top_of_the_scores_is_named() -> None:
    (line,) = verdict(chosen(value=0.999, score_range=[0.0, 1.0], event_f1=0.6), 42)
    assert line.startswith("warning: the threshold 0.999 sits at the top of the validation scores")


def test_a_threshold_at_an_edge_of_a_detector_that_works_is_no_warning() -> None:
    # a confident model: its event windows score 1, the threshold just under it finds 40 of 42
    assert verdict(chosen(value=0.999, score_range=[0.0, 1.0]), 42) == []
    assert verdict(chosen(value=0.0001, score_range=[0.0, 1.0]), 42) == []


def test_event_recall_under_a_half_is_named_with_its_counts() -> None:
    (line,) = verdict(chosen(event_found=3, event_recall=3 / 42), 42)
    assert line.startswith(
        "warning: event recall 0.07: 3 of 42 validation events found within 0.5 s; "
    )


def test_false_alarms_above_ten_an_hour_and_above_the_events_are_named() -> None:
    (line,) = verdict(chosen(false_alarms=131, false_alarms_per_hour=131.0), 42)
    assert line.startswith("warning: 131 false alarms per hour (131 against 42 validation events)")


def test_false_alarms_fewer_than_the_events_are_no_warning_however_many_an_hour() -> None:
    # a heart-beat detector: 2,000 beats and 20 false alarms an hour
    figures = chosen(events=2000, event_found=1990, event_recall=0.995, false_alarms=20)
    assert verdict({**figures, "false_alarms_per_hour": 20.0}, 2000) == []


def test_fail_under_targets_are_read_repeated_or_comma_separated() -> None:
    assert parse_targets(["event_f1=0.8,pr_auc=0.5", "event_recall=0.9"]) == {
        "event_f1": 0.8,
        "pr_auc": 0.5,
        "event_recall": 0.9,
    }


def test_a_fail_under_target_without_a_number_is_refused() -> None:
    with pytest.raises(UsageError, match=r"\(received 'event_f1=high'\)"):
        parse_targets(["event_f1=high"])


def test_a_figure_under_its_target_raises_with_exit_code_3() -> None:
    with pytest.raises(BelowTargetError, match=r"run: written, but event_f1 0\.950 is under") as e:
        check_targets(chosen(), {"event_f1": 0.99}, "run")
    assert e.value.exit_code == 3


def test_a_figure_the_run_could_not_measure_misses_its_target() -> None:
    with pytest.raises(BelowTargetError, match=r"event_f1 could not be measured"):
        check_targets(None, {"event_f1": 0.5}, "run")


def test_figures_at_or_above_their_targets_pass() -> None:
    check_targets(chosen(), {"event_f1": 0.95, "event_recall": 0.9}, "run")


def test_as_many_false_alarms_as_events_at_a_high_rate_are_named() -> None:
    figures = chosen(events=2, event_found=2, event_recall=1.0, false_alarms=2)
    lines = verdict({**figures, "false_alarms_per_hour": 1800.0}, 2)
    assert lines[-1].startswith("warning: 1.8e+03 false alarms per hour (2 against 2 validation")
