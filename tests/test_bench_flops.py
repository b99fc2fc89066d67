"""FLOPs counted from Keras models against hand counts, and the CPU peak from the flags."""

from __future__ import annotations

import pytest

from chunkfit.bench.flops import CpuPeak, count_flops, cpu_peak, physical_cores
from chunkfit.train.models import build_model

ZEN5 = """processor\t: 0
vendor_id\t: AuthenticAMD
cpu family\t: 26
model name\t: AMD EPYC
cpu MHz\t\t: 2596.124
flags\t\t: fpu fma avx2 avx512f avx512_bf16
"""


def test_baseline_cnn_costs_its_hand_count_of_multiply_adds() -> None:
    """Conv1D(24, 9) over 96 positions, Dense(20) on 24 x 24 pooled values, Dense(2)."""
    assert count_flops(build_model("baseline-cnn", 104, 1, 2)).multiply_adds == (
        96 * 24 * 9 + 24 * 24 * 20 + 20 * 2
    )


def test_baseline_cnn_costs_about_0_19_mflop_per_training_window() -> None:
    assert count_flops(build_model("baseline-cnn", 104, 1, 2)).per_training_window == 193_776


def test_dilated_resnet_costs_its_hand_count_of_multiply_adds() -> None:
    """Conv1D(32, 7) on 1 channel, eight Conv1D(32, 3) on 32, all over 104 positions ("same"),
    Dense(2) on the 64 pooled values; dilation changes no count."""
    assert count_flops(build_model("dilated-resnet", 104, 1, 2)).multiply_adds == (
        104 * 32 * 7 + 8 * 104 * 32 * 3 * 32 + 64 * 2
    )


def test_a_nested_model_counts_its_layers() -> None:
    import keras

    inner = build_model("baseline-cnn", 104, 1, 2)
    x = keras.Input((104, 1))
    outer = keras.Model(x, keras.layers.Dense(3)(inner(x)))
    assert count_flops(outer).multiply_adds == 96 * 24 * 9 + 24 * 24 * 20 + 20 * 2 + 2 * 3


def test_a_weighted_layer_it_does_not_know_is_listed_not_guessed() -> None:
    import keras

    x = keras.Input((104, 1))
    y = keras.layers.Embedding(10, 4, name="emb")(keras.layers.Flatten()(x))
    assert count_flops(keras.Model(x, y)).uncounted == ("emb (Embedding)",)


def test_zen5_avx512_has_sixteen_lanes_per_fma_unit() -> None:
    peak = cpu_peak(ZEN5, lscpu="", cores=2)
    assert peak is not None and (peak.lanes, peak.fma_units) == (16, 2)


def test_zen4_splits_avx512_over_256_bit_units() -> None:
    peak = cpu_peak(ZEN5.replace("cpu family\t: 26", "cpu family\t: 25"), lscpu="", cores=2)
    assert peak is not None and peak.lanes == 8


def test_avx2_with_fma_has_eight_lanes() -> None:
    peak = cpu_peak(ZEN5.replace(" avx512f avx512_bf16", ""), lscpu="", cores=2)
    assert peak is not None and peak.lanes == 8


def test_clock_comes_from_lscpu_max_mhz_where_it_shows_one() -> None:
    peak = cpu_peak(ZEN5, lscpu="CPU max MHz:    3700.0000\n", cores=2)
    assert peak is not None and (peak.ghz, peak.clock_from) == (3.7, 'lscpu "CPU max MHz"')


def test_clock_falls_back_to_cpuinfo_mhz() -> None:
    peak = cpu_peak(ZEN5, lscpu="", cores=2)
    assert peak is not None and peak.clock_from == '/proc/cpuinfo "cpu MHz"'


def test_peak_is_cores_lanes_units_two_and_clock() -> None:
    peak = CpuPeak(2, 16, 2, 2.5, "given", "x", ())
    assert peak.gflops == pytest.approx(2 * 16 * 2 * 2 * 2.5)


def test_bfloat16_flag_is_reported() -> None:
    peak = cpu_peak(ZEN5, lscpu="", cores=2)
    assert peak is not None and "avx512_bf16" in peak.flags


SMT = {0: "0:0", 1: "0:1", 2: "0:0", 3: "0:1"}  # two cores, each with two logical CPUs


def test_smt_siblings_count_as_one_core() -> None:
    assert physical_cores([0, 1, 2, 3], SMT, threads_per_core=2) == 2


def test_two_siblings_of_one_core_are_one_core() -> None:
    assert physical_cores([0, 2], SMT, threads_per_core=2) == 1


def test_cores_of_another_package_count_apart() -> None:
    assert physical_cores([0, 1], {0: "0:0", 1: "1:0"}, threads_per_core=2) == 2


def test_without_core_ids_the_logical_cpus_are_divided_by_threads_per_core() -> None:
    assert physical_cores([0, 1, 2, 3], {}, threads_per_core=2) == 2
