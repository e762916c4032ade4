"""Python stacks in call order: faulthandler's dumps turned outermost first (l4_plugin.stacks)."""

from __future__ import annotations

from l4_plugin.stacks import DUMP_FRAME, bare, call_order, without_dump

# What a rank of tests/realruns/cases/segfault-in-save printed (CPython 3.11's faulthandler,
# enabled by torch's @record) when native code it called dereferenced a null pointer (its
# paths shortened).
CRASH = """\
Fatal Python error: Segmentation fault

Thread 0x00007fe6eeffe6c0 (most recent call first):
  File "/usr/lib/python3.11/threading.py", line 327 in wait
  File "/usr/lib/python3.11/multiprocessing/queues.py", line 231 in _feed
  File "/usr/lib/python3.11/threading.py", line 982 in run

Current thread 0x00007fe7177c9b80 (most recent call first):
  File "/usr/lib/python3.11/ctypes/__init__.py", line 519 in string_at
  File "/work/train.py", line 195 in pack_shard
  File "/work/train.py", line 178 in save_checkpoint
  File "/work/train.py", line 279 in train
  File "/venv/site-packages/torch/distributed/elastic/errors/__init__.py", line 367 in wrapper
  File "/work/train.py", line 322 in <module>

Extension modules: numpy._core._multiarray_umath, torch._C, torch._C._nn (total: 3)"""


def _functions(lines: list[str]) -> list[str]:
    return [line.rsplit(" in ", 1)[1] for line in lines if DUMP_FRAME.search(line)]


def test_the_crashed_threads_stack_outermost_first_the_others_left_out() -> None:
    assert _functions(call_order(CRASH)) == [
        "<module>",
        "wrapper",
        "train",
        "save_checkpoint",
        "pack_shard",
        "string_at",
    ]
    # the lines that are no frames stay where they were
    lines = call_order(CRASH)
    assert lines[0] == "Fatal Python error: Segmentation fault"
    assert lines[-1].startswith("Extension modules: ")


def test_every_threads_stack_when_none_is_marked_current() -> None:
    # dump_traceback_later's timeout, or a dump taken from another thread: no "Current thread"
    dump = CRASH.replace("Current thread", "Thread")
    assert _functions(call_order(dump)) == [
        "run",
        "_feed",
        "wait",
        "<module>",
        "wrapper",
        "train",
        "save_checkpoint",
        "pack_shard",
        "string_at",
    ]


def test_headers_of_other_interpreters_and_a_pasted_stack_without_one() -> None:
    named = CRASH.replace(
        "Current thread 0x00007fe7177c9b80 (most recent call first):",
        "Current thread 0x00007fe7177c9b80 [pt_main_thread] (most recent call first):",
    )
    assert _functions(call_order(named))[-1] == "string_at"
    assert _functions(call_order(named))[0] == "<module>"
    old = CRASH.replace(" (most recent call first):", ":")
    assert _functions(call_order(old))[0] == "<module>"
    # DeepSpeed#797: a stack pasted on its own, innermost first
    paste = (
        '  File "deepspeed/runtime/engine.py", line 1456 in _checkpoint_tag_validation\n'
        '  File "deepspeed/runtime/engine.py", line 1489 in save_checkpoint\n'
        '  File "transformers/trainer.py", line 1094 in train'
    )
    assert _functions(call_order(paste)) == [
        "train",
        "save_checkpoint",
        "_checkpoint_tag_validation",
    ]


def test_a_traceback_and_labelled_lines_as_they_are() -> None:
    tb = (
        "Traceback (most recent call last):\n"
        '  File "train.py", line 3, in <module>\n'
        "    main()\n"
        '  File "train.py", line 2, in main\n'
        "ValueError: x"
    )
    assert call_order(tb) == tb.splitlines()
    labelled = "\n".join(f"[default0]:{line}" for line in CRASH.splitlines())
    assert _functions(call_order(labelled))[-1] == "string_at"


def test_without_dump_keeps_what_the_record_said() -> None:
    kept = without_dump(CRASH.splitlines())
    assert [x for x in kept if x] == ["Fatal Python error: Segmentation fault"]
    labelled = [f"[default0]:{line}" for line in CRASH.splitlines()]
    assert [x for x in without_dump(labelled) if x != "[default0]:"] == [
        "[default0]:Fatal Python error: Segmentation fault"
    ]
    # no dump: "..." and the like are someone's words
    said = ["Loading checkpoint ...", "Extension modules: none"]
    assert without_dump(said) == said


def test_a_stack_printed_alone_is_bare() -> None:
    # deepspeedai/DeepSpeed#797: the stuck rank's faulthandler stack, pasted without its header
    hung = (
        '  File "/code/DeepSpeed/deepspeed/runtime/engine.py", line 1456 in '
        "_checkpoint_tag_validation\n"
        '  File "/code/DeepSpeed/deepspeed/runtime/engine.py", line 1489 in save_checkpoint\n'
        '  File "/code/transformers/src/transformers/trainer.py", line 1212 in _save_checkpoint'
    )
    assert bare(hung)
    # a traceback cut before its exception, under ranks' labels, with its source lines
    cut = (
        "[rank1]: Traceback (most recent call last):\n"
        '[rank1]:   File "/work/train.py", line 279, in train\n'
        "[rank1]:     save_checkpoint(args, model)\n"
        '[rank1]:   File "/work/train.py", line 178, in save_checkpoint\n'
        "[rank1]:     torch.save(state, path)"
    )
    assert bare(cut)
    assert bare(CRASH.split("\n", 2)[2])  # the dump less its "Fatal Python error" line
    # what says what happened is no bare stack; nor is a single frame
    assert not bare(cut + "\n[rank1]: OSError: [Errno 28] No space left on device")
    assert not bare(CRASH)
    assert not bare('  File "/work/train.py", line 178 in save_checkpoint')
