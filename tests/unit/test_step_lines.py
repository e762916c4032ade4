"""The steps a job's stamped lines state, and the pace between them (``queries._read_steps``)."""

from __future__ import annotations

from collections.abc import Sequence

from l4_plugin.analysis.tables import Cell, TemplateInfo
from l4_plugin.diagnosis.queries import _read_steps


class _Lines:
    """The kept lines of a job, latest first (what ``JobLines.latest_lines`` answers)."""

    def __init__(self, lines: list[tuple[float, str, str]]) -> None:
        self.lines = sorted(lines, reverse=True)

    def latest_lines(self, tids: Sequence[str], size: int) -> list[tuple[float, str, str]]:
        return [x for x in self.lines if x[2] in tids][:size]


def test_a_series_numbered_past_the_iterations_printed_gives_no_pace() -> None:
    # HF's Trainer printed iterations to 1310 (every 10); its saves every 400 iterations took
    # 60 s, 2.4 s an iteration between them. DeepSpeed's engine printed "step=…" every 800
    # micro-steps (8 an iteration): its 0.3 s a "step" is no iteration's, nor is it joined
    # with the saves it shares a number with (800).
    templates = {
        "save": TemplateInfo("Saving model checkpoint to <PATH>"),
        "ds": TemplateInfo("[Rank <NUM>] step=<NUM>, skipped=<NUM>, lr=<*>"),
    }
    saves = [
        (1000.0 + 1020.0 * k + d, f"Saving model checkpoint to /c/checkpoint-{400 * k}", "save")
        for k in (1, 2, 3)
        for d in (0.0, 60.0)
    ]
    ds = [
        (1000.0 + 235.0 * k, f"[Rank 0] step={800 * k}, skipped=0, lr=[1e-5]", "ds")
        for k in range(1, 14)
    ]
    cells = {("n", "save"): Cell(6, 2020.0, 4120.0), ("n", "ds"): Cell(13, 1235.0, 4055.0)}
    spans = {b: 10 for b in range(0, 1320, 10)}
    out = _read_steps(_Lines(saves + ds), templates, {}, spans, cells)  # type: ignore[arg-type]
    assert out["step_pace"] == (2020.0 + 1020.0 - 2080.0) / 400
    # with no progress printed, the numbering cannot be checked: every series counts
    alone = _read_steps(_Lines(ds), templates, {}, {}, cells)  # type: ignore[arg-type]
    assert alone["step_pace"] == 235.0 / 800
