"""A progress bar's own clock (``analysis.clock``) and the iteration it places a failure in
(``diagnosis.assembly``)."""

from __future__ import annotations

import math
from types import SimpleNamespace

from l4_plugin.analysis.clock import bar_clock, frame_of
from l4_plugin.analysis.tables import Cell, JobData, JobDoc

T0 = 1_756_920_000.0  # the stamp printed right before the bar's first frame


def _frame(it: int, elapsed: int, total: int = 525) -> str:
    minutes, seconds = divmod(elapsed, 60)
    hours, minutes = divmod(minutes, 60)
    shown = f"{hours}:{minutes:02d}:{seconds:02d}" if hours else f"{minutes:02d}:{seconds:02d}"
    return f" {100 * it // total}%|██ | {it}/{total} [{shown}<55:39,  7.70s/it]"


def test_a_frame_reads_its_iteration_total_and_elapsed_time() -> None:
    assert frame_of(_frame(130, 1098)) == (130, 525, 1098.0)
    assert frame_of("Epoch 0:  51%|█| 440/862 [1:01:34<59:03,  0.12it/s, v_num=f1hp]") == (
        440,
        862,
        3694.0,
    )
    # a line that holds several frames shows its last; a frame 0 has no rate yet
    assert frame_of(_frame(9, 70) + _frame(10, 77)) == (10, 525, 77.0)
    assert frame_of("  0%|          | 0/202 [00:00<?, ?it/s]") == (0, 202, 0.0)
    # tqdm's scientific notation is no exact global step: the bar's batch
    sci = "Epoch 0:  35%|█| 1001/2837 [2:08:49<3:37:42,  0.13it/s, global_step=1e+3, loss=2.1]"
    assert frame_of(sci) == (1001, 2837, 7729.0)
    assert frame_of("{'loss': 8.2371, 'grad_norm': 1.626246, 'epoch': 0.58}") is None


def test_the_bars_start_is_the_latest_moment_its_stamps_allow() -> None:
    # Every 10 iterations a chunk of frames, 7.7 s an iteration; each line takes the stamp of
    # the last stamped line before it: a DeepSpeed "step=" line printed 10 iterations before
    # its last frame. Frame 0 follows "Running training" at once: that stamp is the start.
    lines = [
        ("n1", "bar", None, T0 + 77.0 * (k - 1) + 1.0, _frame(10 * k, 77 * k)) for k in range(1, 14)
    ]
    lines.append(("n1", "bar0", None, T0, "  0%|          | 0/525 [00:00<?, ?it/s]"))
    clock = bar_clock(lines, {"bar"})
    assert clock is not None and clock.node == "n1"
    assert clock.start == T0
    assert clock.last == (130, T0 + 1001.0)
    assert math.isclose(clock.pace or 0.0, 7.7)
    # without the first frame (another bar's total, a model's shards loading): 10 iterations
    # early, the best the chunks' stamps allow
    other = [
        *lines[:-1],
        ("n1", "bar0", None, T0, "Loading checkpoint shards: 0/4 [00:00<?, ?it/s]"),
    ]
    clock = bar_clock(other, {"bar"})
    assert clock is not None and clock.start == T0 + 1.0 - 77.0


def test_a_restarted_bar_is_read_from_its_last_run_and_a_lone_frame_gives_no_clock() -> None:
    first = [("n1", "bar", None, T0 + 60.0 * k, _frame(10 * k, 60 * k)) for k in range(1, 6)]
    # the bar restarted (a new epoch) at T0 + 400 s: its elapsed time starts again
    again = [("n1", "bar", None, T0 + 400.0 + 30.0 * k, _frame(50 + 5 * k, 30 * k)) for k in (1, 2)]
    clock = bar_clock(first + again, {"bar"})
    assert clock is not None
    assert clock.frames == ((55, 30.0), (60, 60.0))
    assert clock.start == T0 + 400.0
    assert bar_clock(first[:1], {"bar"}) is None
    assert bar_clock(first, set()) is None  # no progress template: no clock


def _data(bar: list[tuple[str, str, int | None, float, str]], lead_at: float) -> JobData:
    buckets = {10 * k: T0 for k in range(14)}  # the bar's lines all carry one stale stamp
    return JobData(
        job=JobDoc("j", "failed", "fp", ("n1", "n2"), 100, 0.0, 1000.0),
        time_unit="ts",
        cells={("n2", "oom"): Cell(count=1, first_ts=lead_at, last_ts=lead_at)},
        templates={},
        stage_spans={},
        iteration_cells={(b, "bar"): (t, 1) for b, t in buckets.items()}
        | {(130, "oom"): (lead_at, 1)},
        iteration_spans=dict.fromkeys(buckets, 10),
        node_iteration_start={("n1", b): t for b, t in buckets.items()},
        node_last_iteration={"n1": 130},
        progress_lines=tuple(bar),
    )


def _no_progress(lead_at: float) -> JobData:
    """``_data``'s job with no progress printed at all: no bar, no iteration buckets."""
    from dataclasses import replace

    return replace(
        _data([], lead_at),
        iteration_cells={},
        iteration_spans={},
        node_iteration_start={},
        node_last_iteration={},
    )


def _oom_analysis(stage: str = "training") -> SimpleNamespace:
    """An analysis whose best-ranked event is the template "oom", no slowdown, in ``stage``."""
    return SimpleNamespace(
        fusion=SimpleNamespace(
            stage=stage, events=[SimpleNamespace(template_id="oom")], iterations=[]
        ),
        slowdown=None,
    )


def test_a_flat_timeline_places_the_failure_by_the_bars_clock() -> None:
    # Ray forwards the bar in chunks of ten frames; the job was killed for memory 52 s after
    # the last frame (130) at 7.7 s an iteration: iteration 137, not 131.
    from l4_plugin.diagnosis.iterations import report_iterations

    bar = [("n1", "bar", None, T0, _frame(10 * k, 77 * k)) for k in range(1, 14)]
    bar.append(("n1", "bar0", None, T0, "  0%|          | 0/525 [00:00<?, ?it/s]"))
    analysis = _oom_analysis()
    data = _data(bar, T0 + 1001.0 + 52.0)
    assert next((i.iteration, i.why) for i in report_iterations(analysis, data)) == (137, "clock")
    # an error printed a few seconds past the point the bar's next line (140) was due: the
    # failure came before its error, no later than 140
    data = _data(bar, T0 + 1001.0 + 10 * 7.7 + 5.0)
    assert next((i.iteration, i.why) for i in report_iterations(analysis, data)) == (140, "clock")
    # the event came before the bar's last frame (not what stopped the job), or hours after
    # it: after the last iteration printed
    for at in (T0 + 900.0, T0 + 1001.0 + 3600.0):
        data = _data(bar, at)
        assert next((i.iteration, i.why) for i in report_iterations(analysis, data)) == (
            131,
            "last",
        )
    # a checkpoint's save begun after the last frame: how long it took, nothing says
    from dataclasses import replace

    from l4_plugin.analysis.tables import TemplateInfo

    saving = _data(bar, T0 + 1001.0 + 52.0)
    saving = replace(
        saving,
        cells=saving.cells | {("n1", "save"): Cell(1, T0 + 1005.0, T0 + 1005.0)},
        templates={"save": TemplateInfo("Saving model checkpoint to <PATH>")},
    )
    assert next((i.iteration, i.why) for i in report_iterations(analysis, saving)) == (131, "last")
    # a bar whose stamps are older than it ("Running training" in the node's other file, 77 s
    # after the stream's last stamp): the bar began no earlier than training did
    late = [("n1", "bar", None, T0 - 77.0, _frame(10 * k, 77 * k)) for k in range(1, 14)]
    began = _data(late, T0 + 1001.0 + 52.0)
    began = replace(
        began,
        cells=began.cells | {("n1", "run"): Cell(1, T0, T0)},
        templates={"run": TemplateInfo("***** Running training *****")},
    )
    assert next((i.iteration, i.why) for i in report_iterations(analysis, began)) == (137, "clock")
    # a bar drawn every iteration showed where the job stood: its clock adds nothing
    every = [("n1", "bar", None, T0, _frame(k, 8 * k)) for k in range(1, 131)]
    data = _data(every, T0 + 8 * 130 + 20.0)
    assert next((i.iteration, i.why) for i in report_iterations(analysis, data)) == (131, "last")
    # no bar that shows its elapsed time: after the last iteration printed
    data = _data([], T0 + 1053.0)
    assert next((i.iteration, i.why) for i in report_iterations(analysis, data)) == (131, "last")


def test_a_save_that_states_its_step_pins_the_bars_start() -> None:
    # The bar's lines all borrowed a stamp printed 79 s before the bar began, and no frame 0 was
    # kept: the stamps allow a start 156 s early, and the Xid 52 s after the last frame (130)
    # seems 208 s after it, past the bar's reach. The save of step 100 began right after its
    # frame (elapsed 770 s), at T0 + 770.5: the bar began by T0 + 0.5; the Xid struck 137.
    from dataclasses import replace

    from l4_plugin.diagnosis.iterations import report_iterations

    bar = [("n1", "bar", None, T0 - 79.0, _frame(10 * k, 77 * k)) for k in range(1, 14)]
    analysis = _oom_analysis()
    data = _data(bar, T0 + 1001.0 + 52.0)
    assert next((i.iteration, i.why) for i in report_iterations(analysis, data)) == (131, "last")
    began = "Scheduled async checkpoint save for /ckpt/model-step=100-consumed=51200.0-last"
    ended = "Async checkpoint save for step 101 (/ckpt/model-step=100-consumed=51200.0-last) done"
    saved = ((T0 + 770.5, began), (T0 + 790.0, ended))
    pinned = replace(data, step_lines=saved)
    assert next((i.iteration, i.why) for i in report_iterations(analysis, pinned)) == (137, "clock")
    # a step line before the frame the stamps allow (another attempt's save of step 100): no pin
    early = replace(data, step_lines=((T0 - 400.0, began),))
    assert next((i.iteration, i.why) for i in report_iterations(analysis, early)) == (131, "last")
    # NeMo's asynchronous save of the last frame's step, pinned there: the Xid struck while it
    # ran, and how long the iterations waited for it, nothing says: after the last printed
    from l4_plugin.analysis.tables import TemplateInfo

    last = "Scheduled async checkpoint save for /ckpt/model-step=130-consumed=66560.0-last"
    at_last = replace(
        data,
        step_lines=((T0 + 1001.5, last),),
        cells=data.cells | {("n1", "sched"): Cell(1, T0 + 1001.5, T0 + 1001.5)},
        templates={"sched": TemplateInfo("Scheduled async checkpoint save for <PATH>")},
    )
    assert next((i.iteration, i.why) for i in report_iterations(analysis, at_last)) == (
        131,
        "last",
    )
    # its end came 30 s on ("… finalized"), the Xid 52 s after that, in training: the
    # iterations waited for the save, then went on at the bar's pace: 137
    fin = "Async checkpoint save for step <NUM> (<PATH>) finalized"
    ended = replace(
        at_last,
        cells=at_last.cells
        | {
            ("n1", "fin"): Cell(1, T0 + 1031.5, T0 + 1031.5),
            ("n2", "oom"): Cell(1, *[T0 + 1083.5] * 2),
        },
        templates={**at_last.templates, "fin": TemplateInfo(fin)},
    )
    assert next((i.iteration, i.why) for i in report_iterations(analysis, ended)) == (137, "clock")
    # a later save begun before the Xid: under way, for how long nothing says
    later = replace(ended, cells=ended.cells | {("n1", "sched"): Cell(2, T0 + 1001.5, T0 + 1070.0)})
    assert next((i.iteration, i.why) for i in report_iterations(analysis, later)) == (131, "last")


def test_a_save_the_job_failed_in_is_not_counted_past() -> None:
    # The bar's last frame (130) at T0 + 1001; a save began right after it and wrote its
    # weights 30 s on (HF's "Saving model checkpoint …", then "Model weights saved in …"); the
    # job failed 52 s after that. In training, the save had ended: 137. While saving (its
    # rename failed): the lines are of the save it failed in, how long it ran before is not
    # the iterations': after the last printed.
    from dataclasses import replace

    from l4_plugin.analysis.tables import TemplateInfo
    from l4_plugin.diagnosis.iterations import report_iterations

    bar = [("n1", "bar", None, T0, _frame(10 * k, 77 * k)) for k in range(1, 14)]
    bar.append(("n1", "bar0", None, T0, "  0%|          | 0/525 [00:00<?, ?it/s]"))
    data = _data(bar, T0 + 1083.5)
    saved = replace(
        data,
        cells=data.cells
        | {
            ("n1", "save"): Cell(1, T0 + 1001.5, T0 + 1001.5),
            ("n1", "weights"): Cell(1, T0 + 1031.5, T0 + 1031.5),
        },
        templates={
            "save": TemplateInfo("Saving model checkpoint to <PATH>"),
            "weights": TemplateInfo("Model weights saved in <PATH>", stages={"checkpointing": 1}),
        },
    )
    assert next((i.iteration, i.why) for i in report_iterations(_oom_analysis(), saved)) == (
        137,
        "clock",
    )
    failing = _oom_analysis("checkpointing")
    assert next((i.iteration, i.why) for i in report_iterations(failing, saved)) == (131, "last")


def test_a_failure_while_saving_is_in_the_saves_step() -> None:
    # The bar's last frames (131..139) were lost at the kill; the save of step 139 began 70 s
    # after frame 130 and the filesystem evicted the node 10 s into it: iteration 139, where a
    # save that states no step leaves the iteration after the last printed.
    from dataclasses import replace

    from l4_plugin.diagnosis.iterations import report_iterations

    bar = [("n1", "bar", None, T0, _frame(10 * k, 77 * k)) for k in range(1, 14)]
    bar.append(("n1", "bar0", None, T0, "  0%|          | 0/525 [00:00<?, ?it/s]"))
    analysis = _oom_analysis("checkpointing")
    data = _data(bar, T0 + 1001.0 + 80.0)
    save = "Scheduled async checkpoint save for /ckpt/model-step=139-consumed=71168.0-last"
    saving = replace(data, step_lines=((T0 + 1001.0 + 70.0, save),))
    assert next((i.iteration, i.why) for i in report_iterations(analysis, saving)) == (139, "clock")
    # the save began after the failure: not the failure's
    late = replace(data, step_lines=((T0 + 1001.0 + 90.0, save),))
    assert next((i.iteration, i.why) for i in report_iterations(analysis, late))[0] != 139


def test_a_stated_step_is_read_and_implausible_ones_are_left_out() -> None:
    from l4_plugin.analysis.clock import stated_step, step_anchor

    # NeMo's end of a save names the count of steps done and the checkpoint, whose name numbers
    # the step as the progress lines do ("global_step: 89"): the smaller
    fin = "Async checkpoint save for step 90 (/ckpt/model-step=89-consumed=46080.0-last) finalized"
    assert stated_step(fin) == 89
    assert stated_step("[Torch] Checkpoint global_step60 is ready now!") == 60
    assert stated_step("Saving model checkpoint to /ckpt/14b/checkpoint-120") == 120
    assert stated_step("successfully saved checkpoint from iteration at iteration 100") == 100
    assert stated_step("Saving model checkpoint to /ckpt/last") is None
    lines = [
        (T0 + 10.0, "[Rank 0] step=1600, skipped=0, lr=[1.5e-05]"),  # DeepSpeed's micro-steps
        (T0 + 5.0, fin),
        (T0, "Scheduled async checkpoint save for /ckpt/model-step=89-consumed=46080.0-last"),
    ]
    assert step_anchor(lines, last=91, reach=64) == (89, T0 + 5.0)
    assert step_anchor(lines[:1], last=91, reach=64) is None


def test_the_pace_steps_state_leaves_the_saves_out() -> None:
    # saves at steps 9, 19, 29 begin (Scheduled) and end (finalized) 40 s apart; between the
    # end of one and the beginning of the next, 10 steps at 7.6 s: not the 11.6 s the saves'
    # beginnings alone would say
    from l4_plugin.analysis.clock import stated_pace, stated_times

    points = []
    for k in range(3):
        began = T0 + 116.0 * k
        points += [(began, 10 * k + 9), (began + 40.0, 10 * k + 9)]
    times = stated_times(points)
    assert times[19] == (T0 + 116.0, T0 + 156.0)
    assert stated_pace(times) == 7.6
    # one line per step: the interval between them
    assert stated_pace(stated_times([(T0, 9), (T0 + 116.0, 19)])) == 11.6
    assert stated_pace(stated_times([(T0, 9)])) is None


def test_a_stamped_step_and_the_stated_pace_place_lost_progress() -> None:
    # NeMo's text progress on stdout, buffered: the last 18 steps never reached the file (91
    # printed, no time of its own). Rank 0's stamped "save for step 90 (…step=89…) finalized"
    # (step 89 done: the next began when the save ended) and the stated 7.5 s a step count to
    # the Xid 144 s later: iteration 109.
    from dataclasses import replace

    from l4_plugin.diagnosis.iterations import report_iterations

    data = _data([], T0 + 144.0 + 5.0)
    fin = "Async checkpoint save for step 90 (/ckpt/model-step=89-consumed=46080.0-last) finalized"
    data = replace(
        data,
        step_lines=((T0 + 5.0, fin),),
        node_iteration_seconds={("n1", b): 7.5 for b in range(0, 140, 10)},
    )
    data.node_last_iteration = {"n1": 91}
    analysis = _oom_analysis()
    assert next((i.iteration, i.why) for i in report_iterations(analysis, data)) == (109, "clock")
    # a count that lands before what the job printed is no clock
    data.node_last_iteration = {"n1": 120}
    assert next((i.iteration, i.why) for i in report_iterations(analysis, data)) == (121, "last")
    # the save far behind what was printed (80 steps to the Xid, 32 past the last printed
    # step, 137): what the kill lost is counted from the last printed step, which the seconds
    # each printed step states place (T0 + 5 + 48 × 7.5 s), not from the save's
    far = replace(data, cells={("n2", "oom"): Cell(1, T0 + 5.0 + 600.0, T0 + 5.0 + 600.0)})
    far.node_last_iteration = {"n1": 137}
    assert next((i.iteration, i.why) for i in report_iterations(analysis, far)) == (169, "clock")
    # the printed steps from 130 on state 10 s each: 137 came at T0 + 5 + 40 × 7.5 + 8 × 10 s,
    # and 220 s more at the pace of the last buckets (7.5 s) make 30 steps
    slower = {("n1", b): 10.0 if b >= 130 else 7.5 for b in range(0, 140, 10)}
    far = replace(far, node_iteration_seconds=slower)
    assert next((i.iteration, i.why) for i in report_iterations(analysis, far)) == (167, "clock")
    far.node_last_iteration = {"n1": 100}  # 70 lost: a failure long after the job stopped
    assert next((i.iteration, i.why) for i in report_iterations(analysis, far)) == (101, "last")


def test_the_line_where_a_slowdown_began_is_an_event() -> None:
    # A straggler holds every rank back from iteration 8 on, and the job runs into its time
    # limit: no error says so; the progress line of iteration 8 (1035 ms an iteration, 45 ms
    # before) does. It comes second: what slowed the job, when a line says, stays first.
    from dataclasses import replace

    from l4_plugin.analysis.results import Slowdown
    from l4_plugin.analysis.tables import TemplateInfo
    from l4_plugin.diagnosis.assembly import decide_verdict, report_events

    line = " iteration        8/      40 | elapsed time per iteration (ms): 1035.1 |"
    first = " iteration        1/      40 | elapsed time per iteration (ms): 8635.4 |"
    rows = [
        ("n1", "it", 0, T0, first),
        ("n1", "it", 8, T0 + 9.0, line),
        ("n1", "it", 9, T0 + 10.0, line.replace("8/", "9/")),
    ]
    data = replace(
        _data(rows, T0 + 600.0),
        templates={"it": TemplateInfo("iteration <NUM>/ <NUM> | elapsed time per iteration")},
        iteration_cells={(b, "it"): (T0 + b, 1) for b in range(14)},
        node_iteration_seconds={("n1", b): 0.05 if b < 8 else 1.0 for b in range(14)},
    )

    def fused(tid: str, score: float) -> SimpleNamespace:
        return SimpleNamespace(
            template_id=tid,
            score=score,
            nodes=["n2"],
            count=1,
            first_seen=T0,
            level="ERROR",
            reasons=["error-level"],
        )

    slow = Slowdown(first_iteration=8, reference=0.05, ratio=20.0)
    events = [fused("oom", 0.9), fused("term", 0.5)]
    analysis = SimpleNamespace(
        fusion=SimpleNamespace(stage="training", events=events, nodes=[], iterations=[]),
        events=[],
        slowdown=slow,
        hang=None,
        outsiders={},
    )
    reported = report_events(data, analysis, {})
    assert [e.template_id for e in reported] == ["oom", "it", "term"]
    assert reported[1].sample == line and reported[1].reasons == ("slowdown-line:8",)
    assert reported[1].score == 0.5 and reported[1].sample_node == "n1"
    # the verdict reads the added event too
    assert decide_verdict(data, analysis, reported, []).category
    # second even when the leading event began later (the kernel rate-limits its thermal
    # reports: the first may come long after the throttling began)
    later = replace(data, iteration_cells=data.iteration_cells | {(12, "oom"): (T0 + 12, 1)})
    assert [e.template_id for e in report_events(later, analysis, {})] == ["oom", "it", "term"]
    # first when the lead's words are only a consequence (the teardown of a job stopped at its
    # time limit: "Received 15 death signal", a DataLoader's finalizer) or a handled condition
    for said in ("consequence-words", "benign-words"):
        analysis.fusion.events = [fused("term", 0.5), fused("oom", 0.4)]
        analysis.fusion.events[0].reasons = ["error-level", said]
        reported = report_events(data, analysis, {})
        assert [e.template_id for e in reported] == ["it", "term", "oom"]
        assert reported[0].score == 0.5
    analysis.fusion.events = events
    # no slowdown: no such event
    analysis.slowdown = None
    assert [e.template_id for e in report_events(data, analysis, {})] == ["oom", "term"]


def test_a_slowdown_begins_where_the_bars_elapsed_time_says() -> None:
    # A thermal throttle from iteration 65: 11.8 s an iteration before, 26.4 s after; a frame
    # every 5 iterations; a checkpoint's save at 45 (one slow interval). tqdm's smoothed rate put
    # the onset at 78; the elapsed time between frames puts it at 65.
    from l4_plugin.analysis.clock import BarClock, slowed_from

    elapsed, frames = 0.0, [(0, 0.0)]
    for it in range(1, 200):
        elapsed += 26.4 if it >= 65 else 11.8
        elapsed += 60.0 if it == 45 else 0.0
        if it % 5 == 0:
            frames.append((it, elapsed))
    clock = BarClock("n1", T0, tuple(frames))
    assert slowed_from(clock.frames, reference=11.8, after=78) == 65
    # only the save was slow: no slowdown by the clock
    save = [
        (it, e + (60.0 if it >= 45 else 0.0)) for it, e in ((i, 11.8 * i) for i in range(0, 200, 5))
    ]
    assert slowed_from(tuple(save), reference=11.8, after=78) is None


def _slowed_at_249(
    pause: float = 0.0,
) -> tuple[dict[int, float], list[int], JobData, SimpleNamespace]:
    """A job at 3.5 s a step, 7.0 s from step 249 (its line the first slow one), held up
    ``pause`` seconds after step 245 (a save); the index's buckets of eleven steps; a thermal
    line 0.5 s after 249's line in the bucket of 243, where the stated rates put the onset.
    The steps' times, the buckets, the job and its analysis."""
    from dataclasses import replace

    from l4_plugin.analysis.results import Slowdown

    t, times = T0, {}
    for it in range(1, 300):
        t += (7.0 if it >= 249 else 3.5) + (pause if it == 246 else 0.0)
        times[it] = t
    buckets = list(range(1, 300, 11))  # 1, 12, ..., 243, 254, ..., 298
    data = replace(
        _data([], times[249] + 0.5),
        iteration_cells={(b, "it"): (times[b], 11) for b in buckets}
        | {(243, "hot"): (times[249] + 0.5, 1)},
        iteration_spans=dict.fromkeys(buckets, 11),
        node_iteration_start={("n1", b): times[b] for b in buckets},
        node_last_iteration={"n1": 298},
    )
    analysis = SimpleNamespace(
        fusion=SimpleNamespace(stage="training", events=[], iterations=[]),
        slowdown=Slowdown(first_iteration=243, reference=3.5, ratio=2.0, events=("hot",)),
    )
    return times, buckets, data, analysis


def test_a_slowdown_within_a_coarse_bucket_begins_where_the_buckets_times_say() -> None:
    # torchtitan prints a stamped line every step; the index keeps buckets of eleven steps.
    # 3.5 s a step, 7.0 s from step 249 (its line is the first slow one); the stated rates put
    # the onset in the bucket of 243, the thermal line comes after 249's line.
    from dataclasses import replace

    from l4_plugin.diagnosis.iterations import report_iterations

    times, buckets, data, analysis = _slowed_at_249()
    assert next((i.iteration, i.why) for i in report_iterations(analysis, data)) == (
        249,
        "slowdown",
    )
    # the times put it outside the onset's bucket (a save's pause there): the stated rates
    late = replace(data, node_iteration_start={("n1", b): times[b] for b in buckets if b < 243})
    assert next(i.iteration for i in report_iterations(analysis, late)) != 249


def test_a_slowdowns_first_line_places_it_past_a_save_in_its_bucket() -> None:
    # As above, but a save (torchtitan's "Saving the checkpoint …" to "Finished saving …",
    # no step stated) held the bucket of 243 up 20 s after step 245. The buckets' times put
    # the onset early (the save's pause looks slow); the thermal line 0.5 s after 249's line
    # came once the first slow iteration had run: the iterations before it, the save's time
    # left out, at the old pace.
    from dataclasses import replace

    from l4_plugin.analysis.tables import TemplateInfo
    from l4_plugin.diagnosis.iterations import report_iterations

    times, _, data, analysis = _slowed_at_249(pause=20.0)
    saving = "Saving the checkpoint (or staging if async is enabled)."
    saved = "Finished saving the checkpoint (or staging if async is enabled)in <DUR>."
    data = replace(
        data,
        templates={"saving": TemplateInfo(saving), "saved": TemplateInfo(saved)},
        iteration_cells=data.iteration_cells
        | {
            (243, "saving"): (times[245] + 0.2, 8),
            (243, "saved"): (times[245] + 19.8, 8),
        },
    )
    assert next((i.iteration, i.why) for i in report_iterations(analysis, data)) == (
        249,
        "slowdown",
    )
    # rates stated on another scale than the clock's (twice the seconds): the same onset, the
    # slow iteration counted at the clock's pace times the slowdown's ratio
    scaled = SimpleNamespace(
        fusion=analysis.fusion, slowdown=replace(analysis.slowdown, reference=7.0)
    )
    assert next(i.iteration for i in report_iterations(scaled, data)) == 249
    # the save's lines unread (no template says it saves): the pause is counted as iterations
    unread = replace(data, templates={})
    assert next(i.iteration for i in report_iterations(analysis, unread)) > 250


def test_the_bars_pace_leaves_out_the_intervals_a_save_held_up() -> None:
    # A frame every 10 iterations at 5.1 s an iteration; the saves at 30 and 60 each held one
    # interval up 40 s. The iterations after the last frame go at the training pace.
    from dataclasses import replace

    from l4_plugin.analysis.clock import BarClock
    from l4_plugin.analysis.tables import TemplateInfo
    from l4_plugin.diagnosis.iterations import _training_pace

    elapsed, frames = 0.0, [(0, 0.0)]
    for it in range(10, 80, 10):
        elapsed += 51.0 + (40.0 if it in (40, 70) else 0.0)
        frames.append((it, elapsed))
    clock = BarClock("n1", T0, tuple(frames))
    saves = {("n1", "save"): Cell(2, T0 + 3 * 51.0 + 1.0, T0 + 6 * 51.0 + 41.0)}
    data = replace(
        _data([], T0),
        cells=saves,
        templates={"save": TemplateInfo("Saving model checkpoint to <PATH>")},
    )
    assert clock.pace is not None and clock.pace > 6.0  # the saves in it
    assert _training_pace(data, clock) == 5.1
    # a save every other interval, and only a node's first and last save line known (the
    # index kept no copy of the others: NeMo's "Scheduled async checkpoint save" on every
    # run): the slow intervals between them held saves too
    elapsed, frames = 0.0, [(0, 0.0)]
    for it in range(10, 110, 10):
        elapsed += 40.0 + (46.0 if it % 20 == 0 else 0.0)
        frames.append((it, elapsed))
    every = BarClock("n1", T0, tuple(frames))
    first_last = {("n1", "save"): Cell(5, T0 + 41.0, T0 + 41.0)}
    assert _training_pace(replace(data, cells=first_last), every) == 4.0


def test_a_bar_whose_every_interval_held_a_save_is_paced_without_them() -> None:
    # A frame every 10 iterations at 3.5 s an iteration; NeMo saved every 10 steps and the
    # iterations waited 29 s each time ("Scheduled async checkpoint save … step=9" to "Async
    # checkpoint save for step 10 (…step=9…) finalized"): every interval is 64 s, the training
    # pace 3.5 s.
    from dataclasses import replace

    import pytest

    from l4_plugin.analysis.clock import BarClock
    from l4_plugin.diagnosis.iterations import _training_pace

    frames = tuple((it, 64.0 * k) for k, it in enumerate(range(9, 60, 10)))
    clock = BarClock("n1", T0, frames)
    lines: list[tuple[float, str]] = []
    for k, step in enumerate(range(9, 40, 10)):
        at = T0 + 64.0 * k
        lines.append((at, f"Scheduled async checkpoint save for /ckpt/x-step={step}-last"))
        lines.append(
            (
                at + 29.0,
                f"Async checkpoint save for step {step + 1} (/ckpt/x-step={step}-last) "
                "finalized successfully",
            )
        )
    data = replace(_data([], T0), step_lines=tuple(reversed(lines)))
    assert _training_pace(data, clock) == pytest.approx(3.5)
    # saves every 30 steps, a frame every 10: the intervals without one give the pace
    sparse = tuple(line for line in lines if "step=9-" in line[1] or "step=39-" in line[1])
    assert _training_pace(replace(data, step_lines=sparse), clock) == pytest.approx(6.4)
    # one save known: no stride, the bar's own pace
    assert _training_pace(replace(data, step_lines=tuple(lines[:2])), clock) == clock.pace


def test_a_periodic_step_lines_last_copy_is_counted_from_the_kept_ones() -> None:
    # NeMo's "save for step N finalized" every 10 steps, about two minutes apart: the index kept
    # the first three of four; the fourth, at the template's last time, is step 40.
    from l4_plugin.analysis.clock import periodic_steps

    seen = [(T0 + 102.0, 10), (T0 + 229.0, 20), (T0 + 353.0, 30)]
    assert periodic_steps(seen, Cell(4, T0 + 102.0, T0 + 473.0)) == (T0 + 473.0, 40)
    # no line missing; not the first line kept; off the schedule in time or in steps: nothing
    assert periodic_steps(seen, Cell(3, T0 + 102.0, T0 + 353.0)) is None
    assert periodic_steps(seen, Cell(5, T0 + 50.0, T0 + 473.0)) is None
    assert periodic_steps(seen, Cell(4, T0 + 102.0, T0 + 900.0)) is None
    assert periodic_steps([*seen[:2], (T0 + 353.0, 35)], Cell(4, T0 + 102.0, T0 + 473.0)) is None


def test_a_job_without_progress_lines_is_placed_from_its_stated_steps() -> None:
    # No rank printed progress; the last save (step 40) ended 16 s before the cable error, the
    # saves say 12.4 s a step: iteration 42. A failure before that save places nothing.
    from dataclasses import replace

    from l4_plugin.diagnosis.iterations import report_iterations

    data = replace(
        _no_progress(T0 + 489.0),
        step_lines=((T0 + 353.0, "Async checkpoint save for step 30 (/ckpt/x) finalized"),),
        step_counts=((T0 + 473.0, 40),),
        step_pace=12.4,
    )
    analysis = _oom_analysis()
    assert [(i.iteration, i.why) for i in report_iterations(analysis, data)] == [(42, "clock")]
    early = replace(data, cells={("n2", "oom"): Cell(1, T0 + 400.0, T0 + 400.0)})
    assert report_iterations(analysis, early) == ()
    # the kernel's soft lockup, 36 s after the save: the CPU was stuck 22 s by then, so the
    # job stopped 14 s after it (iteration 42), not 36 s (43)
    from l4_plugin.analysis.tables import TemplateInfo

    lockup = "watchdog: BUG: soft lockup - CPU#21 stuck for 22s! [python3:2456777]"
    stuck = replace(
        data,
        cells={("n2", "oom"): Cell(1, T0 + 473.0 + 36.0, T0 + 473.0 + 36.0)},
        templates={"oom": TemplateInfo("watchdog: BUG: soft lockup - <*>", message=lockup)},
    )
    assert [(i.iteration, i.why) for i in report_iterations(analysis, stuck)] == [(42, "clock")]


def test_three_buckets_at_one_stamp_are_progress_with_no_time_of_its_own() -> None:
    # A short NeMo job's bar (frames 9, 19, 29 kept) all borrowed one start-up stamp: too few
    # buckets for "most start no later than the one before", but every one at the same stamp
    from l4_plugin.diagnosis.iterations import _unplaced_progress

    assert _unplaced_progress({9: T0, 19: T0, 29: T0})
    assert not _unplaced_progress({9: T0, 19: T0 + 55.0, 29: T0 + 110.0})
    assert not _unplaced_progress({9: T0, 19: T0})  # two: no sign
    assert not _unplaced_progress({9: T0, 19: T0, 29: T0 + 110.0})


def test_a_runs_start_states_the_step_before_it() -> None:
    from l4_plugin.analysis.clock import resumed_step, stated_step

    assert (
        stated_step("[titan] 2025-05-24 12:01:40,265 - root - INFO - Training starts at step 61")
        == 60
    )
    assert resumed_step("Training starts at step 61, with local batch size 4") == 60
    assert resumed_step("  Continuing training from global step 120") == 120
    assert (
        resumed_step(" successfully loaded checkpoint from /ckpt [ t 0, p 0 ] at iteration 500")
        == 500
    )
    assert resumed_step("Saving the checkpoint at step 60.") is None
    assert stated_step("Saving the checkpoint at step 60.") == 60


def test_a_resumed_run_without_progress_failed_in_its_first_step() -> None:
    # A restarted attempt loaded step 60 and said "Training starts at step 61"; its GPU failed
    # 16 s later, before any progress line and with no pace to count by: step 61. A failure
    # before that line, or a latest step line that is a save (not where training began), says
    # nothing.
    from dataclasses import replace

    from l4_plugin.diagnosis.iterations import report_iterations

    start = (
        T0 + 100.0,
        "[titan] 2025-05-24 12:01:40,265 - root - INFO - Training starts at step 61",
    )
    data = replace(
        _no_progress(T0 + 116.0),
        step_lines=(start,),
        step_pace=None,
    )
    analysis = _oom_analysis()
    assert [(i.iteration, i.why) for i in report_iterations(analysis, data)] == [(61, "clock")]
    early = replace(data, cells={("n2", "oom"): Cell(1, T0 + 90.0, T0 + 90.0)})
    assert report_iterations(analysis, early) == ()
    assert report_iterations(_oom_analysis("model_loading"), data) == ()
    # A save of step 60 (not where training began) and no pace: the job's start, 600 s before
    # the save, bounds a step's time at 10 s (start-up included); the failure 16 s after the
    # save came at least 2 steps on; with no start, or one after the save, nothing says.
    saved = replace(data, step_lines=((T0 + 100.0, "Finished saving the checkpoint at step 60"),))
    started = replace(saved, job=replace(saved.job, start_ts=T0 - 500.0))
    assert [(i.iteration, i.why) for i in report_iterations(analysis, started)] == [(62, "clock")]
    for start in (None, T0 + 200.0):
        unknown = replace(saved, job=replace(saved.job, start_ts=start))
        assert report_iterations(analysis, unknown) == ()


def _noticing(lead_at: float, noticed_at: float) -> JobData:
    """The bar of ``test_a_flat_timeline_places_the_failure_by_the_bars_clock``, the failure's
    own line at ``lead_at`` and the driver's report of it (an error) at ``noticed_at``."""
    from dataclasses import replace

    from l4_plugin.analysis.tables import TemplateInfo

    bar = [("n1", "bar", None, T0, _frame(10 * k, 77 * k)) for k in range(1, 14)]
    bar.append(("n1", "bar0", None, T0, "  0%|          | 0/525 [00:00<?, ?it/s]"))
    data = _data(bar, lead_at)
    return replace(
        data,
        cells=data.cells | {("n0", "trial"): Cell(1, noticed_at, noticed_at)},
        templates={
            "oom": TemplateInfo("what(): CUDA error: unknown error"),
            "trial": TemplateInfo(
                "ERROR tune_controller.py:<NUM> -- Trial task failed for trial <*>",
                levels={"ERROR": 1},
            ),
        },
    )


def test_a_failure_without_a_time_of_its_own_is_placed_by_when_the_job_noticed_it() -> None:
    # A worker's traceback, unstamped, took the stamp of the driver's line before it (before
    # the bar's last frame, 130 at T0 + 1001): Ray's driver reported the trial failed 52 s after
    # that frame, at 7.7 s an iteration, in 137: the failure came about an iteration before
    # the report, 136, not 131. Noticed 12 iterations on (the next chunk of ten frames would
    # have shown 140): 140 at most. Noticed an hour on: it says nothing, after the last
    # printed.
    from l4_plugin.diagnosis.iterations import report_iterations

    analysis = _oom_analysis()
    first = lambda data: next((i.iteration, i.why) for i in report_iterations(analysis, data))  # noqa: E731
    assert first(_noticing(T0, T0 + 1001.0 + 52.0)) == (136, "clock")
    assert first(_noticing(T0, T0 + 1001.0 + 12 * 7.7 - 1.0)) == (140, "clock")
    assert first(_noticing(T0, T0 + 1001.0 + 3600.0)) == (131, "last")
    # an error line the job printed before the last frame too is no report of this failure
    from dataclasses import replace

    early = _noticing(T0, T0 + 1001.0 + 52.0)
    early = replace(early, cells=early.cells | {("n3", "trial"): Cell(1, T0 + 500.0, T0 + 500.0)})
    assert first(early) == (131, "last")


def test_a_failure_in_the_last_bucket_with_a_borrowed_time_is_placed_by_the_clock() -> None:
    # The buckets have times (each chunk of the bar took the stamp of a line 15.5 s before it),
    # so the progress is placed; the failure's line took the last bucket's stamp too: the
    # bucket's start says nothing of when it struck, the bar's clock and the driver's report do.
    from dataclasses import replace

    from l4_plugin.diagnosis.iterations import report_iterations

    data = _noticing(T0 + 985.5, T0 + 1001.0 + 52.0)
    starts = {10 * k: T0 + 77.0 * k - 15.5 for k in range(14)}
    data = replace(
        data,
        iteration_cells={(b, "bar"): (t, 1) for b, t in starts.items()}
        | {(130, "oom"): (T0 + 985.5, 1)},
        node_iteration_start={("n1", b): t for b, t in starts.items()},
    )
    analysis = _oom_analysis()
    assert next((i.iteration, i.why) for i in report_iterations(analysis, data)) == (136, "clock")
    # in whole seconds, one second's lines are no sign of a borrowed stamp
    whole = replace(
        data,
        cells=data.cells | {("n2", "oom"): Cell(1, T0 + 985.0, T0 + 985.0)},
        iteration_cells=data.iteration_cells | {(130, "oom"): (T0 + 985.0, 1)},
        node_iteration_start=dict.fromkeys([("n1", 130)], T0 + 985.0)
        | {k: v for k, v in data.node_iteration_start.items() if k != ("n1", 130)},
    )
    assert next(i.why for i in report_iterations(analysis, whole)) != "clock"
    # a line with a time of its own later in the bucket: where its time says
    own = replace(data, cells=data.cells | {("n2", "oom"): Cell(1, T0 + 1020.0, T0 + 1020.0)})
    own = replace(own, iteration_cells=own.iteration_cells | {(130, "oom"): (T0 + 1020.0, 1)})
    assert next(i.why for i in report_iterations(analysis, own)) != "clock"


def test_a_save_just_before_a_slowdown_is_not_where_it_began() -> None:
    # Frames every ten iterations at 4.5 s: a save held up 109 → 119 (89 s), the interval after
    # it ran at the old pace, and the job slowed to 8.5 s an iteration from 136. Three of the
    # five intervals after the save are slow, but the one right after it is not: the save is
    # one slow interval; the slowdown began at 136.
    from l4_plugin.analysis.clock import slowed_from

    frames = [(9 + 10 * k, 44.0 + 45.0 * k) for k in range(11)]  # 9 … 109 at 4.5 s
    frames += [(119, 581.0), (129, 626.0), (139, 687.0)]
    frames += [(139 + 10 * k, 687.0 + 85.0 * k) for k in range(1, 20)]
    assert slowed_from(frames, 4.5, 137) is None  # (the onset's stated rates say 137)
    assert slowed_from(frames, 4.5, 140) == 136


def test_a_saves_hold_is_taken_out_of_the_interval_where_a_slowdown_began() -> None:
    # Frames every ten iterations at 8.5 s; a save held 89 → 99 up for 79 s (its first and last
    # lines state step 89), and the job slowed to 16.3 s from 93: the interval took 220 s.
    # Taken whole, the slow part would begin before the save (90); less the save's 79 s, at 93.
    from l4_plugin.analysis.clock import slowed_from

    frames = [(9 + 10 * k, 85.0 + 85.0 * k) for k in range(9)]  # 9 … 89 at 8.5 s
    frames += [(99, 765.0 + 220.0)]
    frames += [(99 + 10 * k, 985.0 + 163.0 * k) for k in range(1, 20)]
    assert slowed_from(frames, 8.5, 97) == 90
    assert slowed_from(frames, 8.5, 97, held=[(765.0, 844.0)]) == 93
    # a span longer than the interval's excess takes it no lower than the reference pace
    assert slowed_from(frames, 8.5, 97, held=[(765.0, 985.0)]) is None


def test_the_spans_saves_held_come_from_the_lines_stating_their_steps() -> None:
    from dataclasses import replace

    from l4_plugin.diagnosis.iterations import _held

    lines = (
        (T0 + 768.0, "Scheduled async checkpoint save for /ckpt/model-step=89-consumed=9.0-last"),
        (T0 + 847.0, "Async checkpoint save for step 90 (/ckpt/model-step=89-last) finalized"),
        (T0 + 900.0, "step 95 | loss 2.1"),  # no save's line: no span
        (T0 + 1500.0, "Saving checkpoint at step 179"),  # a lone line: no span
    )
    data = replace(_data([], T0), step_lines=lines)
    assert _held(data) == [(T0 + 768.0, T0 + 847.0)]


def test_a_save_between_the_bars_frames_pins_its_start() -> None:
    # As above, a bar drawn every 10 iterations whose lines all borrowed a stamp 79 s older
    # than it; the save of step 105, between the frames of 100 and 110, began right after its
    # iteration (elapsed 808.5 s) and held the iterations up 20 s. Its step, placed on the bar
    # at the pace of that interval less the save's 20 s, pins the start at T0 + 0.5: the Xid
    # 52 s after the last frame struck 137.
    from dataclasses import replace

    from l4_plugin.diagnosis.iterations import report_iterations

    def elapsed(it: int) -> float:
        return 7.7 * it + (20.0 if it > 105 else 0.0)

    bar = [
        ("n1", "bar", None, T0 - 79.0, _frame(10 * k, round(elapsed(10 * k)))) for k in range(1, 14)
    ]
    analysis = _oom_analysis()
    data = _data(bar, T0 + 0.5 + elapsed(130) + 52.0)
    assert next((i.iteration, i.why) for i in report_iterations(analysis, data)) == (131, "last")
    began = "Scheduled async checkpoint save for /ckpt/model-step=105-consumed=53760.0-last"
    ended = "Async checkpoint save for step 106 (/ckpt/model-step=105-consumed=53760.0-last) done"
    saved = ((T0 + 0.5 + elapsed(105), began), (T0 + 20.5 + elapsed(105), ended))
    pinned = replace(data, step_lines=saved)
    assert next((i.iteration, i.why) for i in report_iterations(analysis, pinned)) == (137, "clock")
    # the step's elapsed time on the bar: at its interval's pace, the save's 20 s left out
    from l4_plugin.analysis.clock import BarClock
    from l4_plugin.diagnosis.iterations import _elapsed_at

    clock = BarClock("n1", T0, tuple((10 * k, elapsed(10 * k)) for k in range(1, 14)))
    assert _elapsed_at(clock, 105, {105: (0.0, 20.0)}) == elapsed(105)
    assert _elapsed_at(clock, 100, {}) == elapsed(100)
    assert _elapsed_at(clock, 5, {}) is None  # before the first frame


def test_a_slowdowns_first_line_is_placed_on_the_bars_clock() -> None:
    # A bar drawn every 10 iterations, its lines all with one stale stamp (so are the index's
    # buckets of 12, and the thermal line it placed in the last); 11.8 s an iteration, 26.4 s
    # from 69. The frames cannot tell (the interval 60-70 holds one slow iteration); the stated
    # rates put the onset in the bucket of 61. The thermal line came 0.5 s after the first slow
    # iteration: on the bar's clock, 69.
    from dataclasses import replace

    from l4_plugin.analysis.results import Slowdown
    from l4_plugin.diagnosis.iterations import report_iterations

    def elapsed(it: int) -> float:
        return 11.8 * min(it, 68) + 26.4 * max(0, it - 68)

    bar = [("n1", "bar", None, T0, _frame(10 * k, round(elapsed(10 * k)))) for k in range(1, 14)]
    bar.append(("n1", "bar0", None, T0, "  0%|          | 0/525 [00:00<?, ?it/s]"))
    buckets = list(range(1, 131, 12))
    hot = T0 + elapsed(69) + 0.5
    data = replace(
        _data(bar, T0 + elapsed(130) + 30.0),
        cells={("n2", "hot"): Cell(count=9, first_ts=hot, last_ts=hot + 600.0)},
        iteration_cells={(b, "bar"): (T0, 12) for b in buckets} | {(121, "hot"): (hot, 9)},
        iteration_spans=dict.fromkeys(buckets, 12),
        node_iteration_start={("n1", b): T0 for b in buckets},
    )
    analysis = SimpleNamespace(
        fusion=SimpleNamespace(stage="training", events=[], iterations=[]),
        slowdown=Slowdown(first_iteration=61, reference=11.8, ratio=26.4 / 11.8, events=("hot",)),
    )
    assert next((i.iteration, i.why) for i in report_iterations(analysis, data)) == (
        69,
        "slowdown",
    )
    # the line far from the onset's bucket (another node's later throttling): not the onset
    late = replace(data, cells={("n2", "hot"): Cell(9, T0 + elapsed(120), T0 + elapsed(125))})
    assert next(i.iteration for i in report_iterations(analysis, late)) == 61


def test_a_bar_only_jobs_buckets_are_timed_over_the_iterations_between_them() -> None:
    # A bar drawn every 48 iterations into the index's buckets of 24: every other bucket holds
    # no line and states no duration. From the training's start, each judged bucket lasts its
    # stated 5.5 s an iteration over the 48 iterations to the next judged one.
    from dataclasses import replace

    from l4_plugin.analysis.recipe import _bucket_times

    its = [1, 49, 97, 145]
    data = replace(
        _data([], T0),
        stage_spans={("n1", "training"): (T0, T0 + 900.0, T0, T0)},
        iteration_spans=dict.fromkeys(range(1, 169, 24), 24),
        node_iteration_start={("n1", b): T0 for b in its},
    )
    at = _bucket_times(data, its, [5.5] * 4)
    assert at == {1: T0, 49: T0 + 264.0, 97: T0 + 528.0, 145: T0 + 792.0}


def test_a_stuck_collectives_start_counts_past_the_lines_a_kill_lost() -> None:
    # gen3's NeMo job under srun: stdout block-buffered, the last ~130 progress lines lost with
    # the kill. The save of step 160 ended at +600 (stamped), training runs 7.8 s a step (the
    # stated train_step_timing), and the watchdog says its ALLREDUCE waited 1800 s: the job went
    # forward till +1380, 100 steps past the save, far past where the last printed line (130)
    # lets a moment say anything. A moment that is no such stall still stops at that reach.
    from dataclasses import replace

    from l4_plugin.analysis.tables import TemplateInfo
    from l4_plugin.diagnosis.iterations import report_iterations

    watchdog = (
        "[Rank 64] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=8407, "
        "OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=1800000) ran for 1800000 "
        "milliseconds before timing out."
    )
    data = replace(
        _data([], T0 + 600.0 + 780.0 + 1800.0),
        templates={"oom": TemplateInfo("[Rank <RANK>] Watchdog caught <*>", message=watchdog)},
        step_lines=((T0 + 600.0, "Async checkpoint save for step 160 (/ckpt/x) finalized"),),
        node_iteration_seconds={("n1", 10 * k): 7.8 for k in range(14)},
    )
    assert [(i.iteration, i.why) for i in report_iterations(_oom_analysis(), data)] == [
        (260, "clock")
    ]
    plain = replace(
        data, templates={"oom": TemplateInfo("Workers killed due to memory pressure (OOM)")}
    )
    assert [i.why for i in report_iterations(_oom_analysis(), plain)] != ["clock"]
    # a bar's last frame, placed by the stale stamp its lines borrowed, is no sure point to
    # count from that far: the stall an hour past it places nothing by the clock
    bar = [("n1", "bar", None, T0, _frame(10 * k, 77 * k)) for k in range(1, 14)]
    bar.append(("n1", "bar0", None, T0, "  0%|          | 0/525 [00:00<?, ?it/s]"))
    barred = replace(
        _data(bar, T0 + 1001.0 + 3600.0 + 1800.0),
        templates={"oom": TemplateInfo("[Rank <RANK>] Watchdog caught <*>", message=watchdog)},
    )
    assert [i.why for i in report_iterations(_oom_analysis(), barred)][:1] != ["clock"]


def test_a_job_that_ended_with_no_cause_named_shows_its_last_progress_line() -> None:
    # PaddlePaddle/Paddle#14739: a trainer returned early after a test pass (its AUC under a
    # threshold) and the job ended quietly; no line names a cause, its last progress line says
    # where it stood. With a cause named, or its template an event already, nothing is added.
    from dataclasses import replace

    from l4_plugin.analysis.tables import TemplateInfo
    from l4_plugin.diagnosis.assembly import with_last_progress
    from l4_plugin.records import Verdict
    from l4_plugin.report.model import ReportEvent

    last = "PassID 0, BatchID 0002, Test Loss 0.59, Auc 0.58"
    rows = [
        ("n1", "pb", 1, T0 + 5.0, last.replace("0002", "0001")),
        ("n1", "pb", 2, T0 + 9.0, last),
    ]
    data = replace(
        _data(rows, T0 + 600.0),
        templates={"pb": TemplateInfo("PassID <NUM>, BatchID <NUM>, Test Loss <NUM>")},
    )
    shutdown = ReportEvent(
        "exc", "Exception in <*>", "Exception in thread", "n1", 0.5, ("n1",), 1, None, "ERROR",
        "training", ("error-level",),
    )  # fmt: skip
    unknown = Verdict("unknown", "unknown", (), "as-is", 0.2, ("no rule",))
    events = with_last_progress(data, (shutdown,), unknown)
    assert [e.template_id for e in events] == ["exc", "pb"]
    assert events[1].sample == last and events[1].reasons == ("last-progress",)
    named = replace(unknown, category="user/config")
    assert with_last_progress(data, (shutdown,), named) == (shutdown,)
    assert with_last_progress(data, events, unknown) == events


def test_a_job_that_ended_with_no_cause_and_no_progress_shows_its_last_marker() -> None:
    # OpenRLHF/OpenRLHF#208: every rank printed that it would build its ops under a cache whose
    # stale lock then held them; NVIDIA-NeMo/Speech#2370: Lightning started its process group
    # from a notebook and the process died. No line names a cause and none states progress:
    # the last marker printed says where the job stood.
    from dataclasses import replace

    from l4_plugin.analysis.failing_stage import last_marker
    from l4_plugin.analysis.tables import Cell, TemplateInfo
    from l4_plugin.diagnosis.assembly import with_last_progress
    from l4_plugin.ingest.stages import default_stage_rules
    from l4_plugin.records import Verdict

    texts = {
        "gpu": "GPU available: True, used: True",
        "ddp": "initializing ddp: GLOBAL_RANK: <NUM>, MEMBER: <NUM>/<NUM>",
        "ext": "Using <PATH> as PyTorch extensions root...",
        "warn": "RuntimeWarning: Couldn't find ffmpeg",
    }
    cells = {
        ("n1", "gpu"): Cell(1, T0, T0, 0.0),
        ("n1", "ddp"): Cell(1, T0 + 1.0, T0 + 1.0, 1.0),
        ("n1", "ext"): Cell(8, T0 + 5.0, T0 + 6.0, 2.0),
        ("n1", "warn"): Cell(1, T0 + 7.0, T0 + 7.0, 3.0),
    }
    data = replace(
        _data([], T0 + 600.0),
        cells=cells,
        templates={t: TemplateInfo(x, message=x, stages={"init": 1}) for t, x in texts.items()},
    )
    rules = default_stage_rules()
    assert last_marker(data, rules) == ("n1", "ext")
    assert last_marker(data, None) is None
    # (by place in the file where the lines have no time)
    untimed = replace(
        data,
        time_unit="position",
        cells={k: replace(c, last_ts=math.nan) for k, c in cells.items() if k[1] != "ext"},
    )
    assert last_marker(untimed, rules) == ("n1", "ddp")
    unknown = Verdict("unknown", "unknown", (), "as-is", 0.2, ("no rule",))
    events = with_last_progress(data, (), unknown, ("n1", "ext"))
    assert [(e.template_id, e.reasons) for e in events] == [("ext", ("last-marker",))]
    assert events[0].sample == texts["ext"] and events[0].stage == "init"
    named = replace(unknown, category="user/config")
    assert with_last_progress(data, (), named, ("n1", "ext")) == ()
    assert with_last_progress(data, events, unknown, ("n1", "ext")) == events
