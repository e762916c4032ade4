"""Render one run (failed job or baseline) to a job directory: rank logs, kernel logs, job.yaml."""

from __future__ import annotations

import gzip
import math
import random
from pathlib import Path

import yaml

from l4_simulate import emitters
from l4_simulate.incidents import Cut, Incident
from l4_simulate.noise import Noise
from l4_simulate.plan import STAGES, JobPlan, Timeline

# Worker lines start with this mark; it becomes the job's prefix ("[rank3]:", "[default3]:" or "")
# in one str.replace per file, which keeps a 5 M-line job fast.
_W = "\x00"


def _w(lines: list[str]) -> str:
    return "".join(f"{_W}{line}\n" for line in lines)


def _l(lines: list[str]) -> str:
    return "".join(f"{line}\n" for line in lines)


class IterationBlocks:
    """Per-iteration output shared by every rank of a run (the framework's progress lines)."""

    def __init__(self, plan: JobPlan, timeline: Timeline, nan_from: int | None) -> None:
        rng = random.Random(f"blocks:{plan.seed}:{plan.job_id}")
        self.main: dict[int, str] = {}
        self.extras: dict[int, list[str]] = {}
        fw = plan.config.framework
        extra_n = plan.lines_per_iteration - 1
        first = plan.start_iteration + 1
        for k in range(first, plan.train_iters + 1):
            t = timeline.end_of(k)
            sec = timeline.durations[k]
            nan = nan_from is not None and k >= nan_from
            loss = math.nan if nan else 1.75 + 6.0 * math.exp(-k / 900.0) + rng.gauss(0, 0.03)
            gnorm = math.nan if nan else abs(rng.gauss(0.9, 0.25)) + 0.1
            ms = sec * 1000.0
            if fw == "megatron":
                main = [
                    emitters.megatron_iteration(
                        plan, k, t, ms, loss, gnorm, k - nan_from + 1 if nan and nan_from else 0
                    )
                ]
                pool = ["(min, max) time across ranks (ms):"] + [
                    emitters.megatron_timer(name, ms * rng.uniform(0.01, 0.95))
                    for name in emitters.MEGATRON_TIMERS
                ]
            elif fw == "deepspeed":
                main = emitters.deepspeed_step(plan, k, t, loss, sec)
                main = main[2:] if k % 10 else main
                pool = [
                    emitters.deepspeed_timer(name, ms * rng.uniform(0.05, 0.6))
                    for name in emitters.DEEPSPEED_EXTRA
                ]
            else:
                main = [emitters.hf_progress(plan, k, t - timeline.model_done, sec)]
                if k % 10 == 0 or nan:
                    main.append(emitters.hf_loss(k, plan.train_iters, loss, gnorm))
                pool = [emitters.hf_microstep(i, loss) for i in range(8)]
            self.main[k] = _w(main)
            self.extras[k] = [pool[i % len(pool)] for i in range(extra_n)]
        self.text = {k: self.main[k] + _w(self.extras[k]) for k in self.main}


def write_run(
    root: Path,
    plan: JobPlan,
    timeline: Timeline,
    incident: Incident,
    noise: Noise,
    status: str,
    config: dict[str, object],
) -> None:
    """Write ``root`` (the job directory) for one run."""
    root.mkdir(parents=True, exist_ok=True)
    blocks = IterationBlocks(plan, timeline, incident.nan_from)
    for node in range(len(plan.nodes)):
        for g in plan.node_ranks(node):
            text = _render_rank(plan, timeline, incident, noise, blocks, g)
            _write(root, plan, node, f"rank{g}.log", text)
        if plan.kernel_log:
            _write(
                root,
                plan,
                node,
                f"{plan.kernel_log}.log",
                _render_kernel(plan, timeline, incident, noise, node),
            )
    meta = {"id": plan.job_id, "status": status, "config": config}
    (root / "job.yaml").write_text(yaml.safe_dump(meta, sort_keys=True), "utf-8")


def _write(root: Path, plan: JobPlan, node: int, name: str, text: str) -> None:
    host = plan.nodes[node]
    if plan.layout == "nested":
        path = root / host / name
        path.parent.mkdir(exist_ok=True)
    else:
        path = root / f"{host}-{name}"
    data = text.encode("utf-8")
    if host in plan.gz_nodes:
        path.with_name(path.name + ".gz").write_bytes(gzip.compress(data, compresslevel=1, mtime=0))
    else:
        path.write_bytes(data)


def _render_rank(
    plan: JobPlan, tl: Timeline, inc: Incident, noise: Noise, blocks: IterationBlocks, g: int
) -> str:
    ri = plan.rank_info(g)
    node = ri.node_index
    cut: Cut | None = inc.cuts.get(g)
    reach = STAGES.index(cut.stage) if cut else len(STAGES)
    out: list[str] = []
    if ri.local == 0:
        out.append(_l(inc.init_extra.get(g, [])))
        pre = emitters.launcher_preamble(plan, ri, tl.launch)
        out.append(_l(pre if inc.workers_started else pre[:-1]))
    if reach > 0 and inc.workers_started:
        out.append(_w(emitters.framework_init(plan, ri, tl.launch + 5.0)))
        out.append(_w(noise.init.get(g, [])))
        if plan.accelerator == "ascend":
            out.append(_w(emitters.hccl_init(plan, ri, tl.init_done - 4.0)))
        else:
            out.append(_w(emitters.nccl_init(plan, ri, noise.hcas.get(node, 4))))
        out.append(_w(emitters.framework_init_done(plan, ri, tl.init_done)))
    if reach > 1:
        out.append(_w(emitters.data_loading(plan, ri, tl.init_done, tl.data_done)))
    if reach > 2:
        out.append(_w(emitters.model_loading(plan, ri, tl.data_done, tl.model_done)))
    if reach > 3 or (cut is not None and cut.stage in ("training", "checkpointing")):
        _render_training(plan, tl, inc, noise, blocks, g, cut, out)
    if cut is None:
        out.append(_w(emitters.shutdown(plan, ri, tl.done)))
    out.append(_w(inc.tails.get(g, [])))
    if ri.local == 0:
        tail = inc.launcher_tails.get(node)
        if tail is not None:
            out.append(_l(tail))
        elif not inc.failed:
            out.append(_l(emitters.launcher_success(plan, tl.done + 1.0)))
    prefix = {"": "", "rank": f"[rank{g}]:", "default": f"[default{ri.local}]:"}[plan.prefix]
    return "".join(out).replace(_W, prefix)


def _render_training(
    plan: JobPlan,
    tl: Timeline,
    inc: Incident,
    noise: Noise,
    blocks: IterationBlocks,
    g: int,
    cut: Cut | None,
    out: list[str],
) -> None:
    ri = plan.rank_info(g)
    last = plan.train_iters if cut is None or cut.iteration is None else cut.iteration
    rank_noise = noise.by_iteration.get(g, {})
    rank_extra = inc.extra.get(g, {})
    text = blocks.text
    for k in range(plan.start_iteration + 1, last + 1):
        out.append(text[k])
        if k in rank_noise:
            out.append(_w(rank_noise[k]))
        if k in rank_extra:
            out.append(_w(rank_extra[k]))
        if k % plan.save_interval == 0:
            t = tl.end_of(k)
            out.append(_w(emitters.checkpoint_save(plan, ri, k, t + 0.1)))
            if not (cut is not None and cut.stage == "checkpointing" and k == last):
                out.append(_w(emitters.checkpoint_saved(plan, ri, k, t + tl.save_seconds)))
    if cut is not None and cut.partial and last + 1 in blocks.extras:
        out.append(_w(blocks.extras[last + 1][: cut.partial]))


def _render_kernel(plan: JobPlan, tl: Timeline, inc: Incident, noise: Noise, node: int) -> str:
    rng = random.Random(f"kernel:{plan.seed}:{plan.job_id}:{node}")
    boot = tl.launch - rng.uniform(2 * 86400, 60 * 86400)
    events = list(noise.kernel.get(node, [])) + list(inc.kernel.get(node, []))
    events.append((tl.launch + 2.0, "IPVS: rr: TCP 10.96.0.1:443 - no destination available"))
    events.sort(key=lambda e: e[0])
    style = plan.kernel_log or "kern"
    host = plan.nodes[node]
    return "".join(emitters.kernel(style, host, t, t - boot, msg) + "\n" for t, msg in events)
