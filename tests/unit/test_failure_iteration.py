"""The iteration a job failed in, as the report gives it (``diagnosis.assembly``)."""

from __future__ import annotations

import math
from dataclasses import replace
from types import SimpleNamespace
from typing import Any

import pytest

from l4_plugin.analysis.tables import JobData, JobDoc
from l4_plugin.analysis.temporal import waited
from l4_plugin.diagnosis.iterations import failure_iteration


def _data(cells: dict[tuple[int, str], tuple[float, int]], starts: dict[int, float]) -> JobData:
    return JobData(
        job=JobDoc("j", "failed", "fp", ("a", "b"), 100, 0.0, 1000.0),
        time_unit="ts",
        cells={},
        templates={},
        stage_spans={},
        iteration_cells=cells,
        iteration_spans=dict.fromkeys(starts, 10),
        node_iteration_start={("a", b): t for b, t in starts.items()},
        node_last_iteration={"a": max(starts)},
    )


def _analysis(*tids: str) -> Any:
    events = [SimpleNamespace(template_id=t) for t in tids]
    return SimpleNamespace(fusion=SimpleNamespace(events=events, stage="training"))


# Progress every 10 iterations, 5 s an iteration.
STARTS = {b: 5.0 * b for b in range(0, 300, 10)}


def test_the_best_ranked_event_places_the_failure_within_its_bucket() -> None:
    data = _data({(280, "boom"): (STARTS[280] + 12.0, 1)}, STARTS)
    assert failure_iteration(data, _analysis("noise", "boom")) == (283, "boom")


def test_a_copy_without_a_time_in_an_early_bucket_does_not_place_it() -> None:
    # A copy of the line read where nothing gave it a time sits in bucket 0; the timed copy says
    # where the job was.
    cells = {(0, "boom"): (math.inf, 1), (280, "boom"): (STARTS[280] + 2.0, 1)}
    assert failure_iteration(_data(cells, STARTS), _analysis("boom")) == (281, "boom")


def test_an_error_that_states_its_iteration_is_taken_at_its_word() -> None:
    # Megatron-LM's result validation names the iteration it struck; the progress lines
    # (every 5 iterations, no time of their own) cannot place it that well.
    from dataclasses import replace

    from l4_plugin.analysis.tables import TemplateInfo

    msg = (
        "[rank41]: RuntimeError: Rank 41, node nid005188, device 1, iteration 794: Unexpected "
        "result tensor(nan, device='cuda:1') (message='found NaN in local grad norm')"
    )
    starts = {b: math.inf for b in range(704, 790, 5)}  # progress lines 704 … 789
    data = replace(
        _data({(789, "nan"): (math.inf, 1)}, starts),
        templates={"nan": TemplateInfo("RuntimeError: Rank <NUM> …", message=msg)},
    )
    assert failure_iteration(data, _analysis("nan")) == (794, "nan")
    # a number beyond the next iteration line is not this one's
    later = replace(data, iteration_spans={**data.iteration_spans, 790: 5})
    assert failure_iteration(later, _analysis("nan")) == (789, "nan")


def test_a_timeout_places_the_failure_where_its_wait_began() -> None:
    # The watchdog fires ten minutes after the job stopped: its line is late, but it says how
    # long the collective ran, so when the job stopped (3 iterations past bucket 280).
    from dataclasses import replace

    from l4_plugin.analysis.tables import TemplateInfo

    msg = (
        "[rank5]:[E514 09:55:17.012893438 ProcessGroupNCCL.cpp:616] [Rank 5] Watchdog caught "
        "collective operation timeout: WorkNCCL(SeqNum=6037, OpType=_ALLGATHER_BASE, "
        "NumelIn=29, NumelOut=37, Timeout(ms)=600000) ran for 600025 milliseconds before "
        "timing out."
    )
    late = STARTS[280] + 12.0 + 600.025
    data = replace(
        _data({(280, "wd"): (late, 8)}, STARTS),
        templates={"wd": TemplateInfo("Watchdog caught …", message=msg)},
    )
    assert failure_iteration(data, _analysis("wd")) == (283, "wd")
    # without what it says it waited, a late line says only that the job got past bucket 280
    mute = replace(data, templates={"wd": TemplateInfo("Watchdog caught …", message="timeout")})
    assert failure_iteration(mute, _analysis("wd")) == (281, "wd")
    # a rank's traceback on stderr, no time of its own: it took its iteration line's stamp,
    # which says only that it came after; where the others' wait began says when
    line = STARTS[280] + 0.674  # the iteration line's stamp, to the millisecond
    err = {**data.iteration_cells, (280, "err"): (line, 1)}
    templates = {**data.templates, "err": TemplateInfo("ZeroDivisionError: division by zero")}
    starts = {**data.node_iteration_start, ("a", 280): line}
    traceback = replace(data, iteration_cells=err, templates=templates, node_iteration_start=starts)
    assert failure_iteration(traceback, _analysis("err")) == (283, "err")
    # a time of its own, just after the iteration line: it struck there
    stamped = {**err, (280, "err"): (line + 0.5, 1)}
    assert failure_iteration(replace(traceback, iteration_cells=stamped), _analysis("err")) == (
        281,
        "err",
    )
    # whole seconds: the same second as the iteration line is no sign of a borrowed stamp
    whole = replace(traceback, node_iteration_start={**starts, ("a", 280): STARTS[280]})
    whole = replace(whole, iteration_cells={**err, (280, "err"): (STARTS[280], 1)})
    assert failure_iteration(whole, _analysis("err")) == (280, "err")


@pytest.mark.parametrize(
    ("message", "seconds"),
    [
        (
            "WorkNCCL(SeqNum=5, OpType=ALLREDUCE) ran for 600025 milliseconds before timing out.",
            600.025,
        ),
        (
            "[../third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:81] Timed out waiting "
            "1800000ms for recv operation to complete",
            1800.0,
        ),
        ("RuntimeError: [Rank 0]: Rank 1 failed to pass monitoredBarrier in 2000 ms", 2.0),
        ("ProcessGroupNCCL's watchdog got stuck for 480 seconds without making progress", 480.0),
        (
            "torch.distributed.DistStoreError: wait timeout after 300000ms, keys: "
            "/default_pg/0//cuda//0",
            300.0,
        ),
        (
            "Aug 25 01:07:35 gpu-r10-u03 kernel: [140883.411748] watchdog: BUG: soft lockup - "
            "CPU#21 stuck for 22s! [python3:2456777]",
            22.0,
        ),
        ("INFO: task python3:2456777 blocked for more than 120 seconds.", 120.0),
        # Ray's driver, a node's health checks missed: no number, its defaults' half minute
        (
            "WARNING worker.py:2253 -- The node with node id: 5b88 and address: 10.129.45.77 and "
            "node name: 10.129.45.77 has been marked dead because the detector has missed too "
            "many heartbeats from it.",
            30.0,
        ),
        ("Timeout(ms)=600000", None),
        ("NCCL error: remote process exited or there was a network error", None),
    ],
)
def test_what_a_timeout_says_it_waited(message: str, seconds: float | None) -> None:
    assert waited(message) == (pytest.approx(seconds) if seconds is not None else None)


def test_iterations_after_a_checkpoint_count_from_its_end() -> None:
    # Bucket 280 saved a checkpoint for 60 s (DeepSpeed's engine: its last line says it is
    # ready); a port error 18 s after it struck 4 iterations past 280, not "some time later".
    from dataclasses import replace

    from l4_plugin.analysis.tables import TemplateInfo

    cells = {
        (280, "save"): (STARTS[280] + 0.5, 1),
        (280, "ready"): (STARTS[280] + 65.0, 1),
        (280, "port"): (STARTS[280] + 83.0, 1),
    }
    templates = {
        "save": TemplateInfo("Saving model checkpoint to <PATH>", stages={"checkpointing": 1}),
        "loss": TemplateInfo("{'loss': <NUM>, 'grad_norm': <NUM>}"),
        "ready": TemplateInfo("[Torch] Checkpoint global_step0 is ready now!", {}, {"training": 8}),
        "port": TemplateInfo("NET/IB : mlx0_<NUM>:<NUM> Got async event : port error"),
    }
    data = replace(_data(cells, STARTS), templates=templates)
    assert failure_iteration(data, _analysis("port")) == (284, "port")
    # a save begun an iteration into the bucket (iteration 281 ran first): 285
    cells[(280, "save")] = (STARTS[280] + 5.5, 1)
    assert failure_iteration(data, _analysis("port")) == (285, "port")
    # the save template printed twice as often there as elsewhere: two saves, perhaps, with
    # iterations between them; counted from the end of the last
    cells[(140, "save")] = cells[(200, "save")] = (STARTS[200] + 1.0, 1)
    cells[(280, "save")] = (STARTS[280] + 5.5, 2)
    assert failure_iteration(data, _analysis("port")) == (284, "port")
    # printed there less often than elsewhere: the save's lines fell in two buckets, it began
    # in the one before (these are its late ranks'); counted from its end
    cells[(140, "save")] = cells[(200, "save")] = (STARTS[200] + 1.0, 4)
    assert failure_iteration(data, _analysis("port")) == (284, "port")
    cells[(140, "save")] = cells[(200, "save")] = (STARTS[200] + 1.0, 1)
    # a progress line after the save (HF's loss line, printed every interval): counted from
    # it, as before
    cells[(280, "save")] = (STARTS[280] + 5.5, 1)
    cells.update({(b, "loss"): (t + 1.0, 1) for b, t in STARTS.items()})
    cells[(280, "loss")] = (STARTS[280] + 66.0, 1)
    assert failure_iteration(data, _analysis("port")) == (284, "port")
    for b in STARTS:
        del cells[(b, "loss")]
    cells[(280, "save")] = (STARTS[280] + 0.5, 1)
    # a save's first line alone: counted from it
    del cells[(280, "ready")]
    assert failure_iteration(data, _analysis("port")) == (281, "port")
    # the job failed while saving (the failure's stage): no iteration went on during the save,
    # which is of the iteration 280 completed
    saving = _analysis("port")
    saving.fusion.stage = "checkpointing"
    assert failure_iteration(data, saving) == (280, "port")


def test_a_saves_last_line_and_the_pace_of_training_alone_count_the_iterations() -> None:
    # The save's template came first in bucket 280 at +5 (the last save's "ready" line, late),
    # and this save's own "ready" line, its node's last, at +65: a port error at +83 came 18 s
    # after the save ended. The buckets' pace holds a save each (5 s an iteration); training
    # alone, between the saves the stated steps mark, 2.5 s: iteration 288 (284 at the
    # buckets' pace; 281 counted from the template's first line, too far for the bucket).
    from dataclasses import replace

    from l4_plugin.analysis.tables import Cell, TemplateInfo

    cells = {
        (280, "ready"): (STARTS[280] + 5.0, 2),
        (280, "port"): (STARTS[280] + 83.0, 1),
    }
    templates = {
        "ready": TemplateInfo("[Torch] Checkpoint global_step0 is ready now!", {}, {"training": 8}),
        "port": TemplateInfo("NET/IB : mlx0_<NUM>:<NUM> Got async event : port error"),
    }
    last = Cell(count=30, first_ts=50.0, last_ts=STARTS[280] + 65.0)
    data = replace(
        _data(cells, STARTS), templates=templates, cells={("a", "ready"): last}, step_pace=2.5
    )
    assert failure_iteration(data, _analysis("port")) == (288, "port")
    assert failure_iteration(replace(data, step_pace=None), _analysis("port")) == (284, "port")
    early = replace(data, cells={("a", "ready"): replace(last, last_ts=STARTS[280] + 5.0)})
    assert failure_iteration(early, _analysis("port")) == (281, "port")
    # no save in the bucket: the buckets' own pace, whatever the steps state
    plain = replace(data, cells={}, iteration_cells={(280, "port"): (STARTS[280] + 12.0, 1)})
    assert failure_iteration(plain, _analysis("port")) == (283, "port")


def test_a_borrowed_time_is_placed_by_when_the_job_noticed_the_failure() -> None:
    # A node crashed; its peers' NCCL warning has no stamp of its own and took their last
    # progress line's (280, to the millisecond); no timeout states a wait. The agent's
    # "Sending process … closing signal SIGTERM" (a warning first seen then) came 33 s on, at
    # 5 s an iteration in 287: the failure came about an iteration before, in 286. Noticed
    # past the next progress line (290) by no more than two iterations: 290 at most; later, it
    # says nothing: 280, where the borrowed time puts it.
    from dataclasses import replace

    from l4_plugin.analysis.tables import Cell, TemplateInfo

    at = STARTS[280] + 0.679
    starts = {**STARTS, 280: at}
    cells = {(280, "ib"): (at, 3)}
    templates = {
        "ib": TemplateInfo("NCCL WARN NET/IB : Got completion from peer <IP> with status=<NUM>"),
        "term": TemplateInfo("Sending process <NUM> closing signal SIGTERM", levels={"WARNING": 1}),
    }

    def noticed(after: float) -> Any:
        return replace(
            _data(cells, starts),
            templates=templates,
            cells={("a", "term"): Cell(1, at + after, at + after)},
        )

    assert failure_iteration(noticed(33.0), _analysis("ib")) == (286, "ib")
    # the borrowed warning itself (a warning, first seen at the borrowed time) is no report
    itself = noticed(33.0)
    itself.templates["ib"] = replace(itself.templates["ib"], levels={"WARNING": 3})
    itself.cells[("b", "ib")] = Cell(3, at, at)
    assert failure_iteration(itself, _analysis("ib")) == (286, "ib")
    assert failure_iteration(noticed(58.0), _analysis("ib")) == (290, "ib")
    assert failure_iteration(noticed(300.0), _analysis("ib")) == (280, "ib")
    # a warning the job printed before (its first line earlier) is no report of this
    early = replace(noticed(33.0), cells={("a", "term"): Cell(2, 40.0, at + 33.0)})
    assert failure_iteration(early, _analysis("ib")) == (280, "ib")


def test_a_bucket_counts_from_the_iteration_its_first_progress_line_states() -> None:
    # The index buckets iterations by 15; the job prints "step: N  loss: …" every 10 at 5 s an
    # iteration, so bucket 375 begins with step 380 and bucket 405 with step 410. An error
    # 12 s after step 410's line struck 413 (counted from bucket 405's key at the buckets'
    # uneven pace, 407).
    from dataclasses import replace

    from l4_plugin.analysis.tables import TemplateInfo

    lines = {360: 1800.0, 375: 1900.0, 390: 1950.0, 405: 2050.0}
    stated = {360: 360, 375: 380, 390: 390, 405: 410}
    cells = {(b, "step"): (t, 1) for b, t in lines.items()} | {(405, "boom"): (2062.0, 1)}
    data = replace(
        _data(cells, lines),
        iteration_spans=dict.fromkeys(lines, 15),
        templates={"step": TemplateInfo("step: <NUM>  loss: <NUM>")},
        progress_lines=tuple(
            ("a", "step", b, t, f"step: {stated[b]}  loss: 3.2") for b, t in lines.items()
        ),
    )
    assert failure_iteration(data, _analysis("boom")) == (413, "boom")
    # every rank prints it, and the job's first line of each bucket is a node whose lines
    # were not read (node b, a second earlier): its node's first line says as much
    early = {("b", b): t - 1.0 for b, t in lines.items()}
    assert failure_iteration(
        replace(data, node_iteration_start={**data.node_iteration_start, **early}),
        _analysis("boom"),
    ) == (413, "boom")
    # bucket 390 (step 390's line) holds 390-404; the next line the job prints is step 410's:
    # an error 90 s on, in 408, is still the bucket's (not "past it": 391)
    late = replace(data, iteration_cells={**cells, (390, "boom"): (2040.0, 1)})
    late.iteration_cells.pop((405, "boom"))
    assert failure_iteration(late, _analysis("boom")) == (408, "boom")
    # without the lines' words, from the buckets' keys
    assert failure_iteration(replace(data, progress_lines=()), _analysis("boom")) == (407, "boom")
    # a line stating a number outside its bucket is no bucket's first
    odd = replace(
        data,
        progress_lines=tuple(
            ("a", "step", b, t, f"step: {stated[b] + 100}  loss: 3.2") for b, t in lines.items()
        ),
    )
    assert failure_iteration(odd, _analysis("boom")) == (407, "boom")


def test_a_suspect_iteration_is_placed_by_the_best_ranked_event_in_its_bucket() -> None:
    # DTW finds bucket 280 new for the scheduler's cancellation, printed long after; the
    # best-ranked event of that bucket, 12 s past its start, says where the failure struck.
    from dataclasses import replace

    from l4_plugin.analysis.tables import TemplateInfo
    from l4_plugin.diagnosis.iterations import report_iterations

    cells = {(280, "boom"): (STARTS[280] + 12.0, 1), (280, "cancel"): (STARTS[280] + 900.0, 8)}
    data = replace(_data(cells, STARTS), templates={"boom": TemplateInfo("boom")})
    suspect = SimpleNamespace(
        iteration=280, distance=2.0, threshold=1.0, new_events=["cancel"], missing_events=[]
    )
    analysis = SimpleNamespace(
        fusion=SimpleNamespace(
            stage="training", events=_analysis("boom", "cancel").fusion.events, iterations=[suspect]
        ),
        slowdown=None,
    )
    assert [i.iteration for i in report_iterations(analysis, data)] == [283]
    # the cancellation alone: past the next iteration line's time, only "after 280"
    analysis.fusion.events = _analysis("cancel").fusion.events
    assert [i.iteration for i in report_iterations(analysis, data)] == [281]


def test_an_error_placed_nowhere_that_states_its_iteration_is_taken_at_its_word() -> None:
    # A rank that prints no progress and no time: its traceback has no bucket of its own.
    from dataclasses import replace

    from l4_plugin.analysis.tables import TemplateInfo

    msg = "[rank41]: RuntimeError: Rank 41, node n, device 1, iteration 284: Unexpected result"
    data = replace(
        _data({(280, "cancel"): (STARTS[280] + 900.0, 8)}, STARTS),
        templates={"nan": TemplateInfo("RuntimeError: …", message=msg)},
    )
    assert failure_iteration(data, _analysis("nan", "cancel")) == (284, "nan")


def test_nothing_placed_gives_the_iteration_after_the_last_one_printed() -> None:
    # Progress on stdout with no time, the errors on stderr: no event has a bucket, so the job
    # failed in the iteration after the last it printed.
    from l4_plugin.diagnosis.iterations import report_iterations

    data = _data({(0, "step"): (math.inf, 15)}, {b: math.inf for b in range(1, 16)})
    analysis = SimpleNamespace(
        fusion=SimpleNamespace(
            events=_analysis("boom").fusion.events, iterations=[], stage="training"
        ),
        slowdown=None,
    )
    found = report_iterations(analysis, data)
    assert [(i.iteration, i.why) for i in found] == [(16, "last")]
    # a job that never printed an iteration has none
    data.node_last_iteration = {}
    assert report_iterations(analysis, data) == ()


def test_progress_flushed_at_exit_places_the_failure_after_the_last_step() -> None:
    # Every step printed on stdout, flushed when the rank died: the steps all carry the stamp
    # of the stream's last line, so where the error's time falls says nothing; the last step
    # printed (36) does.
    from l4_plugin.diagnosis.iterations import report_iterations

    starts = {b: 1000.0 for b in range(1, 30)} | {b: 1040.0 for b in range(30, 37)}
    data = _data({(29, "boom"): (1000.5, 1)}, starts)
    data.iteration_spans = dict.fromkeys(starts, 1)
    data.node_last_iteration = {"a": 36}
    analysis = SimpleNamespace(
        fusion=SimpleNamespace(
            events=_analysis("boom").fusion.events, iterations=[], stage="training"
        ),
        slowdown=None,
    )
    assert next((i.iteration, i.why) for i in report_iterations(analysis, data)) == (37, "last")
    # progress every 5 iterations with no time: the last line printed (34) too, unless the
    # error states the iteration it struck (Megatron's "iteration 37: Unexpected result")
    from dataclasses import replace

    from l4_plugin.analysis.tables import TemplateInfo

    every5 = {b: 1000.0 for b in range(4, 40, 5)}
    sparse = _data({(34, "boom"): (1000.5, 1)}, every5)
    sparse.node_last_iteration = {"a": 34}
    sparse.iteration_spans = dict.fromkeys(every5, 1)  # one bucket per line printed
    assert next((i.iteration, i.why) for i in report_iterations(analysis, sparse)) == (35, "last")
    said = "RuntimeError: Rank 4, node n, device 1, iteration 37: Unexpected result tensor(nan)"
    stated = replace(sparse, templates={"boom": TemplateInfo("RuntimeError: …", message=said)})
    assert next((i.iteration, i.why) for i in report_iterations(analysis, stated)) == (
        37,
        "failure",
    )
    # steps that carry their own times: the error's time places it
    data.node_iteration_start = {("a", b): 10.0 * b for b in starts}
    data.iteration_cells = {(29, "boom"): (290.5, 1)}
    assert [(i.iteration, i.why) for i in report_iterations(analysis, data)] == [(30, "failure")]


def test_a_progress_line_later_in_the_bucket_counts_the_steps_from_itself() -> None:
    # HF: the bar's line has no time of its own (it takes the stamp before it, 25 s early); the
    # loss line every interval prints says the job was going on at +24 s. A watchdog's wait
    # began at +24.5 s, the Xid came at +26 s: one step past the bucket, not five.
    from dataclasses import replace

    from l4_plugin.analysis.tables import TemplateInfo

    msg = "[Rank 3] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=9, OpType="
    msg += "ALLREDUCE) ran for 600000 milliseconds before timing out."
    cells: dict[tuple[int, str], tuple[float, int]] = {
        (b, "loss"): (STARTS[b] + 24.0, 1) for b in STARTS
    }
    cells[(280, "xid")] = (STARTS[280] + 26.0, 1)
    cells[(280, "wd")] = (STARTS[280] + 624.5, 8)
    templates = {
        "loss": TemplateInfo("{'loss': <NUM>, 'grad_norm': <NUM>}"),
        "xid": TemplateInfo("NVRM: Xid (PCI:<HEX>): <NUM>, GPU has fallen off the bus"),
        "wd": TemplateInfo("Watchdog caught collective operation timeout", message=msg),
    }
    data = replace(_data(cells, STARTS), templates=templates)
    data.iteration_spans = dict.fromkeys(STARTS, 1)  # a line every 10 iterations, one bucket each
    assert failure_iteration(data, _analysis("xid")) == (281, "xid")


def test_a_saves_failure_that_names_its_checkpoint_is_of_that_step() -> None:
    # HF's rename of tmp-checkpoint-285 failed (another rank had renamed it): the job failed
    # while saving step 285, whatever the time says; in training the words are no step.
    from dataclasses import replace

    from l4_plugin.analysis.tables import TemplateInfo

    cells = {(280, "rename"): (STARTS[280] + 40.0, 1)}
    text = (
        "FileNotFoundError: [Errno 2] No such file or directory: "
        "'/ckpt/tmp-checkpoint-285' -> '/ckpt/checkpoint-285'"
    )
    data = replace(_data(cells, STARTS), templates={"rename": TemplateInfo(message=text)})
    saving = _analysis("rename")
    saving.fusion.stage = "checkpointing"
    assert failure_iteration(data, saving) == (285, "rename")
    assert failure_iteration(data, _analysis("rename")) == (288, "rename")
    # a step outside the bucket (an older checkpoint's name): by time
    other = replace(data, templates={"rename": TemplateInfo(message=text.replace("285", "85"))})
    assert failure_iteration(other, saving) != (85, "rename")
    # the traceback's time borrowed from a line buckets before its save (Ray's driver log):
    # the step it names, up to where a clock reaches past the last iteration printed
    later = replace(data, templates={"rename": TemplateInfo(message=text.replace("285", "297"))})
    assert failure_iteration(later, saving) == (297, "rename")
    # and it leads the suspects, before a DTW suspect of a later bucket placed by time
    from l4_plugin.diagnosis.iterations import report_iterations

    suspect = SimpleNamespace(
        iteration=290, distance=3.0, threshold=1.0, new_events=("ray",), missing_events=()
    )
    saving.fusion.iterations = [suspect]
    saving.slowdown = None
    cells[(290, "ray")] = (STARTS[290] + 14.0, 1)
    found = report_iterations(saving, later)
    assert [i.iteration for i in found][:2] == [297, 293]
    # the failure's own bucket a suspect too (ranked after): its entry leads
    own = SimpleNamespace(
        iteration=280, distance=2.0, threshold=1.0, new_events=("rename",), missing_events=()
    )
    saving.fusion.iterations = [suspect, own]
    assert [i.iteration for i in report_iterations(saving, later)] == [297, 293]


#: Bucket 280's save of step 280: begun at +60 ("… is about to be saved!"), ended at +120.
_READY = "[Torch] Checkpoint global_step280 is ready now!"


def _saved_at_280(tid: str, after: float, count: int, info: Any, **changes: Any) -> JobData:
    """Bucket 280 with its save of step 280 (``_READY``, its stamped line stating the step) and
    one more template ``tid`` (``info``) first printed ``after`` seconds into the bucket, on
    ``count`` nodes; ``changes``: other fields of the job's data."""
    from l4_plugin.analysis.tables import Cell, TemplateInfo

    cells = {
        (280, "begin"): (STARTS[280] + 60.0, 1),
        (280, "ready"): (STARTS[280] + 120.0, 8),
        (280, tid): (STARTS[280] + after, count),
    }
    templates = {
        "begin": TemplateInfo("[Torch] Checkpoint global_step<NUM> is about to be saved!"),
        "ready": TemplateInfo("[Torch] Checkpoint global_step<NUM> is ready now!"),
        tid: info,
    }
    return replace(
        _data(cells, STARTS),
        templates=templates,
        cells={("a", "ready"): Cell(8, 30.0, STARTS[280] + 120.0)},
        step_lines=((STARTS[280] + 120.0, _READY),),
        **changes,
    )


def test_a_save_that_states_its_step_counts_from_its_end_at_the_pace_of_training() -> None:
    # HF's loss line has no stamp: bucket 280's took a line's from a minute before it. The
    # save of step 280 began at +60 ("… is about to be saved!") and ended at +120 ("Checkpoint
    # global_step280 is ready now!"); training alone runs 2 s an iteration (the stated steps);
    # a node ran out of memory at +130: 285 (counted from the bucket's borrowed time, less
    # the save, at the buckets' pace: 281).
    from l4_plugin.analysis.tables import TemplateInfo

    oom = TemplateInfo("Workers killed due to memory pressure (OOM)")
    data = _saved_at_280("oom", 130.0, 1, oom, step_pace=2.0)
    assert failure_iteration(data, _analysis("oom")) == (285, "oom")
    # past the next progress line at that pace (due at 290, never printed): not counted so
    cells = {**data.iteration_cells, (280, "oom"): (STARTS[280] + 150.0, 1)}
    late = replace(data, iteration_cells=cells)
    assert failure_iteration(late, _analysis("oom")) != (295, "oom")
    # the save of an earlier bucket's step, or no pace stated: the buckets' own count
    for other in (
        replace(data, step_lines=((STARTS[280] + 120.0, _READY.replace("280", "270")),)),
        replace(data, step_pace=None),
    ):
        assert failure_iteration(other, _analysis("oom")) == (281, "oom")


def test_a_save_that_states_its_step_counts_at_the_bars_stated_pace() -> None:
    # gen3's k8s/DeepSpeed shape: no stated steps give training's pace, the bar's frames do
    # ("… 2.00s/it"); the save of step 280 ended at +120 and the others' watchdog says their
    # collective began at +130 (a pod killed): five iterations on, 285 (the buckets' own
    # count, the save's minute in it: 281).
    from l4_plugin.analysis.tables import TemplateInfo

    msg = "[Rank 3] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=9, OpType="
    msg += "ALLREDUCE) ran for 600000 milliseconds before timing out."
    wd = TemplateInfo("Watchdog caught collective operation timeout", message=msg)
    paced = {("a", b): 2.0 for b in STARTS}
    data = _saved_at_280("wd", 730.0, 8, wd, node_iteration_seconds=paced)
    assert failure_iteration(data, _analysis("wd")) == (285, "wd")
    assert failure_iteration(replace(data, node_iteration_seconds={}), _analysis("wd"))[0] < 285


def test_a_noticed_failure_counts_from_the_last_progress_line_before_it() -> None:
    # As above (a borrowed time at bucket 280's line, noticed 58 s on), but HF's loss line,
    # printed every interval, came 30 s into the bucket: the job went on till then, and the
    # 28 s after it at 5 s an iteration are the sixth iteration: the failure in the fifth.
    from dataclasses import replace

    from l4_plugin.analysis.tables import Cell, TemplateInfo

    at = STARTS[280] + 0.679
    starts = {**STARTS, 280: at}
    cells = {(280, "ib"): (at, 3)} | {(b, "loss"): (t + 1.0, 1) for b, t in STARTS.items()}
    cells[(280, "loss")] = (at + 30.0, 1)
    templates = {
        "ib": TemplateInfo("NCCL WARN NET/IB : Got completion from peer <IP> with status=<NUM>"),
        "term": TemplateInfo("Sending process <NUM> closing signal SIGTERM", levels={"WARNING": 1}),
        "loss": TemplateInfo("{'loss': <NUM>, 'grad_norm': <NUM>}"),
    }
    data = replace(
        _data(cells, starts), templates=templates, cells={("a", "term"): Cell(1, at + 58, at + 58)}
    )
    assert failure_iteration(data, _analysis("ib")) == (285, "ib")


def test_a_save_under_way_began_at_its_first_nodes_line() -> None:
    # The job failed while saving after step 280's line. The job's bucket 280 begins at node
    # a's line; node b printed "Saving" half a second after it, in time before b's own step
    # line (its clock a little behind), so the bucket holds only a's "Saving", 9 s on. The
    # save began at b's: of the iteration 280 completed, not two iterations later.
    from dataclasses import replace

    from l4_plugin.analysis.tables import Cell, TemplateInfo

    cells = {(280, "save"): (STARTS[280] + 9.0, 1), (280, "evicted"): (STARTS[280] + 40.0, 1)}
    templates = {
        "save": TemplateInfo("Saving the checkpoint", stages={"checkpointing": 8}),
        "evicted": TemplateInfo("LustreError: This client was evicted by <*>"),
    }
    saving = _analysis("evicted")
    saving.fusion.stage = "checkpointing"
    nodes = {("a", "save"): Cell(9, 30.0, STARTS[280] + 9.0)}
    data = replace(_data(cells, STARTS), templates=templates, cells=nodes)
    assert failure_iteration(data, saving) == (281, "evicted")
    b = Cell(9, 29.0, STARTS[280] + 0.5)
    assert failure_iteration(replace(data, cells={**nodes, ("b", "save"): b}), saving) == (
        280,
        "evicted",
    )


def test_a_line_that_took_another_ranks_stamp_is_placed_by_when_the_job_noticed() -> None:
    # Each rank writes its own file; a port error with no stamp of its own took its rank's
    # step line's, 11 ms after the node's first rank printed the same step (its ranks printed
    # it within 41 ms). The agent noticed 33 s on: as if it had taken the first rank's stamp.
    from dataclasses import replace

    from l4_plugin.analysis.tables import Cell, TemplateInfo

    at = STARTS[280] + 0.679
    starts = {**{b: t for b, t in STARTS.items() if b < 280}, 280: at}
    cells = {(280, "ib"): (at + 0.011, 1)} | {(b, "step"): (t, 8) for b, t in starts.items()}
    templates = {
        "ib": TemplateInfo("NCCL WARN NET/IB : mlx5_<NUM>:<NUM> Got async event : port error"),
        "term": TemplateInfo("Sending process <NUM> closing signal SIGTERM", levels={"WARNING": 1}),
        "step": TemplateInfo("step: <NUM> loss: <NUM>"),
    }

    def rank_lines(apart: float) -> Any:
        return replace(
            _data(cells, starts),
            templates=templates,
            cells={
                ("a", "term"): Cell(1, at + 33.0, at + 33.0),
                ("a", "step"): Cell(232, 1.0, at + apart),
                ("a", "ib"): Cell(1, at + 0.011, at + 0.011),
            },
        )

    assert failure_iteration(rank_lines(0.041), _analysis("ib")) == (286, "ib")
    # the node's ranks printed the step over more than a second: the line's time is its own
    assert failure_iteration(rank_lines(1.5), _analysis("ib")) == (281, "ib")


def test_a_slowdown_begins_within_its_bucket_where_the_stated_mean_says() -> None:
    # NeMo's step lines every 5 iterations, no stamp of their own, in buckets of 25: 3.8 s a
    # step before, 8.4 s after. The onset bucket's mean (5.64 s) says its last two lines of five
    # came slow: the first slow one printed step 569, so the first slow step is 565..569; the
    # middle of that stretch is reported.
    from l4_plugin.analysis.results import Slowdown
    from l4_plugin.analysis.tables import Cell, TemplateInfo
    from l4_plugin.diagnosis.iterations import report_iterations

    tid = "nemo"
    buckets = list(range(4, 800, 25))
    mean = {b: 3.8 if b < 554 else 8.4 for b in buckets} | {554: (3 * 3.8 + 2 * 8.4) / 5}
    data = JobData(
        job=JobDoc("j", "failed", "fp", ("a", "b"), 100, 0.0, 9000.0),
        time_unit="ts",
        cells={("a", tid): Cell(5 * len(buckets), 100.0, 100.0, 0.0)},
        templates={tid: TemplateInfo("Training epoch <NUM>, iteration <NUM>/<NUM> | lr: <NUM>")},
        stage_spans={},
        iteration_cells={(b, tid): (100.0, 5) for b in buckets},
        iteration_spans=dict.fromkeys(buckets, 25),
        node_iteration_start={("a", b): 100.0 for b in buckets},
        node_last_iteration={"a": buckets[-1] + 24},
        node_iteration_seconds={("a", b): s for b, s in mean.items()},
    )
    analysis = SimpleNamespace(
        fusion=SimpleNamespace(stage="training", events=[], iterations=[]),
        slowdown=Slowdown(first_iteration=554, reference=3.8, ratio=8.4 / 3.8),
    )
    assert next((i.iteration, i.why) for i in report_iterations(analysis, data)) == (
        567,
        "slowdown",
    )
    # a bucket slow throughout: the slowdown began at its first line or before it
    whole = {("a", b): s for b, s in (mean | {554: 8.4}).items()}
    assert (
        report_iterations(analysis, replace(data, node_iteration_seconds=whole))[0].iteration == 554
    )
    # one line a step: the three slow steps of the bucket's 25 are its last three
    ones = {(b, tid): (100.0, 25) for b in buckets}
    third = {("a", b): s for b, s in (mean | {554: (22 * 3.8 + 3 * 8.4) / 25}).items()}
    once = replace(data, iteration_cells=ones, node_iteration_seconds=third)
    assert report_iterations(analysis, once)[0].iteration == 576


def test_a_stall_long_after_the_last_line_counts_the_unprinted_iterations() -> None:
    # gen3's NeMo job with an NVLink Xid: the last progress line at iteration 46, the kernel's
    # Xid and the stuck collective's start (the watchdog's line less its 1,800 s) 59 s later,
    # at 2.72 s an iteration: the job went on for 22 iterations whose lines its rank held in a
    # buffer when the watchdog aborted it (stdout to a pipe). The stall says so; without it, a
    # late line says only that the job got past the last one.
    from l4_plugin.analysis.tables import TemplateInfo

    starts = {b: 2.72 * b for b in range(0, 47)}
    msg = (
        "Watchdog caught collective operation timeout: WorkNCCL(SeqNum=509, OpType=ALLREDUCE, "
        "NumelIn=1, NumelOut=1, Timeout(ms)=1800000) ran for 1800090 milliseconds before "
        "timing out."
    )
    stall = starts[46] + 59.16
    base = _data({(46, "xid"): (stall + 0.35, 1), (46, "wd"): (stall + 1800.09, 64)}, starts)
    data = replace(
        base,
        iteration_spans=dict.fromkeys(starts, 1),
        templates={
            "xid": TemplateInfo("NVRM: Xid (PCI:<*>): 74, …", message="NVRM: Xid 74"),
            "wd": TemplateInfo("Watchdog caught …", message=msg),
        },
    )
    assert failure_iteration(data, _analysis("xid")) == (68, "xid")
    mute = replace(data, templates={**data.templates, "wd": TemplateInfo("x", message="timeout")})
    assert failure_iteration(mute, _analysis("xid")) == (47, "xid")
    # a save's lines between: the iterations waited for it, how long no line says; the job
    # got past the last line, no more is known
    saved = replace(
        data,
        iteration_cells={**data.iteration_cells, (46, "save"): (starts[46] + 10.0, 1)},
        cells={
            ("a", "save"): SimpleNamespace(first_ts=starts[46] + 10.0, last_ts=starts[46] + 10.0)
        },
        templates={**data.templates, "save": TemplateInfo("Saving checkpoint to <PATH>")},
    )
    assert failure_iteration(saved, _analysis("xid")) == (47, "xid")
    # the progress line states the run's length: 22 unprinted iterations fit in "46/ 100"; past
    # "46/ 60" they cannot have run (a real run of ours: 88 more at its pace than its 40 steps,
    # the stall after a save no line told of): the job got past its last line, no more is known
    for total, placed in ((100, 68), (60, 47)):
        line = f" iteration       46/     {total} | elapsed time per iteration (ms): 2720.0 |"
        stated = replace(data, progress_lines=(("a", "it", 46, starts[46], line),))
        assert failure_iteration(stated, _analysis("xid")) == (placed, "xid")
