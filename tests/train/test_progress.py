"""Progress reports (chunkfit.train.progress): the named reports and a phase's running figures."""

from __future__ import annotations

from chunkfit import TrainProgress
from chunkfit.train.progress import PhaseProgress


def test_a_notice_carries_its_message_and_nothing_trained() -> None:
    p = TrainProgress.notice("class 1 weighted 40x", epochs=3)
    assert (p.phase, p.message, p.epoch, p.epochs, p.windows, p.done) == (
        "notice",
        "class 1 weighted 40x",
        0,
        3,
        0,
        0.0,
    )


def test_a_resume_report_says_how_far_the_run_had_come() -> None:
    p = TrainProgress.resumed(epoch=1, epochs=4, block=3, blocks=10, done=0.325)
    assert (p.phase, p.epoch, p.block, p.blocks, p.done) == ("resume", 1, 3, 10, 0.325)


def test_an_epoch_report_is_the_share_of_epochs_done_with_the_epochs_logs() -> None:
    p = TrainProgress.epoch_end(
        epoch=1, epochs=4, windows=500, windows_per_s=250.0, logs={"loss": 0.5}
    )
    assert (p.phase, p.windows, p.total, p.loss, p.done, p.logs) == (
        "epoch",
        500,
        500,
        0.5,
        0.5,
        {"loss": 0.5},
    )


def test_a_phase_counts_the_windows_of_the_batches_done_in_its_group() -> None:
    phase = PhaseProgress("train", 0, 2, blocks=4, total=1000, batch=10, share=(0.0, 0.4))
    phase.begin_group(n_blocks=2, n_windows=95, batches_before=0)
    p = phase.at(5, {"loss": 1.25})
    assert (p.phase, p.block, p.windows, p.loss, p.done) == ("train", 2, 50, 1.25, 0.4 * 50 / 1000)


def test_a_groups_last_batch_counts_only_the_windows_it_holds() -> None:
    phase = PhaseProgress("train", 0, 2, blocks=4, total=1000, batch=10, share=(0.0, 0.4))
    phase.begin_group(n_blocks=2, n_windows=95, batches_before=0)
    assert phase.at(10, {}).windows == 95


def test_a_resumed_phase_counts_on_from_the_blocks_trained_before() -> None:
    phase = PhaseProgress("train", 1, 2, blocks=4, total=1000, batch=10, share=(0.5, 0.4))
    phase.skip(2, 480)
    phase.begin_group(n_blocks=1, n_windows=260, batches_before=48)
    p = phase.at(50, {})
    assert (p.block, p.windows) == (3, 500)
