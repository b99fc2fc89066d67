"""curves.png says which threshold its precision, recall and F1 panels were taken at."""

from __future__ import annotations

import pytest

from chunkfit.train.runfolder import panel_title


@pytest.mark.parametrize("name", ["precision", "recall", "f1", "val_precision"])
def test_panels_of_figures_at_half_say_so(name: str) -> None:
    assert panel_title(name) == f"{name} (at threshold 0.5)"


@pytest.mark.parametrize("name", ["loss", "pr_auc", "val_event_f1", "threshold"])
def test_other_panels_are_titled_by_their_name(name: str) -> None:
    assert panel_title(name) == name
