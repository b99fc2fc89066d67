"""The settings FitOptions checks at construction: ``--class-weight`` and ``--threshold-for``."""

from __future__ import annotations

import pytest

from chunkfit.config import FitOptions, check_rule, parse_class_weight
from chunkfit.errors import UsageError


def test_class_weight_keywords_come_back_as_they_are() -> None:
    assert [parse_class_weight(k) for k in ("auto", "balanced", "none")] == [
        "auto",
        "balanced",
        "none",
    ]


def test_class_weight_pairs_become_a_dict_of_class_value_to_weight() -> None:
    assert parse_class_weight("0:1,1:40") == {0: 1.0, 1: 40.0}


def test_class_weight_pairs_may_name_negative_class_values() -> None:
    assert parse_class_weight("-1:2.5,5:0") == {-1: 2.5, 5: 0.0}


def test_a_later_pair_for_the_same_class_wins() -> None:
    assert parse_class_weight("1:2,1:3") == {1: 3.0}


def test_a_negative_class_weight_is_refused() -> None:
    with pytest.raises(UsageError, match=r"received '1:-2'"):
        parse_class_weight("1:-2")


def test_an_infinite_class_weight_is_refused() -> None:
    with pytest.raises(UsageError, match=r"CLASS:WEIGHT pairs like 0:1,1:40"):
        parse_class_weight("1:inf")


def test_a_nan_class_weight_is_refused() -> None:
    with pytest.raises(UsageError, match=r"received '1:nan'"):
        parse_class_weight("1:nan")


def test_a_class_weight_without_a_weight_is_refused() -> None:
    with pytest.raises(UsageError, match=r"received '1'"):
        parse_class_weight("1")


def test_a_class_weight_naming_a_class_by_a_word_is_refused() -> None:
    with pytest.raises(UsageError, match=r"received 'event:4'"):
        parse_class_weight("event:4")


def test_an_unknown_class_weight_keyword_is_refused() -> None:
    with pytest.raises(UsageError, match=r"must be auto, balanced, none or CLASS:WEIGHT"):
        parse_class_weight("heavy")


def test_fit_options_refuse_a_class_weight_that_cannot_be_read() -> None:
    with pytest.raises(UsageError, match=r"--class-weight must be"):
        FitOptions(class_weight="0:1,1:")


def test_threshold_rule_f1_is_accepted() -> None:
    assert check_rule("f1") == "f1"


def test_threshold_rule_recall_of_one_is_accepted() -> None:
    assert check_rule("recall=1") == "recall=1"


def test_threshold_rule_precision_in_the_unit_interval_is_accepted() -> None:
    assert check_rule("precision=0.8") == "precision=0.8"


def test_threshold_rule_recall_of_zero_is_refused() -> None:
    with pytest.raises(UsageError, match=r"R, P in \(0, 1\] \(received 'recall=0'\)"):
        check_rule("recall=0")


def test_threshold_rule_precision_above_one_is_refused() -> None:
    with pytest.raises(UsageError, match=r"received 'precision=1.5'"):
        check_rule("precision=1.5")


def test_threshold_rule_without_a_target_is_refused() -> None:
    with pytest.raises(UsageError, match=r"received 'recall'"):
        check_rule("recall")


def test_threshold_rule_with_a_word_for_a_target_is_refused() -> None:
    with pytest.raises(UsageError, match=r"received 'recall=high'"):
        check_rule("recall=high")


def test_threshold_rule_of_another_figure_is_refused() -> None:
    with pytest.raises(UsageError, match=r"must be event-f1, f1, recall=R or precision=P"):
        check_rule("accuracy=0.9")


def test_threshold_rule_event_f1_is_the_default() -> None:
    assert FitOptions().threshold_for == "event-f1"


def test_fit_options_refuse_a_negative_tolerance() -> None:
    with pytest.raises(UsageError, match=r"--tolerance must be a number of seconds >= 0"):
        FitOptions(tolerance=-1.0)


def test_fit_options_refuse_a_match_other_than_peak_or_span() -> None:
    with pytest.raises(UsageError, match=r"--match must be peak or span \(received 'centre'\)"):
        FitOptions(match="centre")


def test_fit_options_refuse_zero_epochs() -> None:
    with pytest.raises(UsageError, match=r"--epochs must be a whole number of at least 1"):
        FitOptions(epochs=0)


def test_fit_options_refuse_a_threshold_rule_that_cannot_be_read() -> None:
    with pytest.raises(UsageError, match=r"--threshold-for must be"):
        FitOptions(threshold_for="f2")


def test_fit_options_from_keywords_nest_the_window_split_and_block_settings() -> None:
    opts = FitOptions.from_keywords(
        window=32, stride=2, validation=0.2, validation_segments=2, chunk=512, seed=3, mix=2
    )
    assert (opts.windows.window, opts.windows.stride, opts.split.validation) == (32, 2, 0.2)
    assert (opts.split.segments, opts.blocks.chunk, opts.blocks.seed, opts.blocks.mix) == (
        2,
        512,
        3,
        2,
    )


def test_fit_options_from_keywords_pass_their_own_fields_through() -> None:
    assert FitOptions.from_keywords(batch_size=64, epochs=3) == FitOptions(batch_size=64, epochs=3)
