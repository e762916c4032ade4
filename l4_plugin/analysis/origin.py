"""Whose code raised an error: the frames of a Python traceback read as user, library or stdlib.

A ``TypeError`` raised in the user's training script is a bug in it (``user/code``); the same
error raised deep inside Megatron-LM, where the user's code never was, is the framework's; a
call made in a library's own code with an argument the installed version of its callee does not
take is a version mismatch; and a ``ValueError`` raised while a framework parses its arguments is
the run's configuration. :func:`refine` turns the category a generic error type gives
(a lexicon entry with ``origin: true``) into one of those from the record's own frames.

Frames are read in the shapes Python tools print: the interpreter's
``File "PATH", line N, in FUNC``, faulthandler's ``File "PATH", line N in FUNC`` (innermost
first: :mod:`l4_plugin.stacks`) and rich's ``PATH:N in FUNC`` (``accelerate launch``, Lightning).
A path is a library's when it lies under ``site-packages``/``dist-packages`` or one of its
directories is a known library package (a clone of Megatron-LM, a relative path Ray prints);
the interpreter's own modules are stdlib and, like a library's call-dispatch wrappers
(``Module._call_impl``), never the place an error is blamed on. Pure.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Sequence
from dataclasses import dataclass

from l4_plugin.analysis.lexicon import Lexicon
from l4_plugin.stacks import FRAME, FRAME_HEAD, call_order, under_frame

USER = ""
STDLIB = "<stdlib>"

_RICH_FRAME = re.compile(r"(?P<path>(?:[\w.~-]*/)+[\w.-]+\.py):\d+ in (?P<func>[\w<>.]+)")
_INSTALLED = re.compile(r"(?:site|dist)-packages/([\w.-]+)")
_STDLIB_PATH = re.compile(r"^<frozen |^<string>|/lib/python\d(?:\.\d+)?/(?![\w.-]*-packages/)")
# A call that failed on its arguments: the frame printed last is the call site.
_API_MISMATCH = re.compile(
    r"unexpected keyword argument|missing \d+ required (?:positional|keyword-only) argument|"
    r"takes (?:from )?\d+ (?:to \d+ )?positional arguments? but \d+ (?:was|were) given|"
    r"got multiple values for (?:keyword )?argument",
    re.IGNORECASE,
)
# An assert on the run's settings: the arguments, the config, the hyper-parameters.
_SETTINGS_ASSERT = re.compile(
    r"^assert\b.*\b(?:args|config|cfg|conf|opt|opts|hparams|params|training_args|\w+_args|"
    r"\w+_config)\.\w+"
)
# The exception line an assert raises, past any label before it.
_ASSERTION = re.compile(r"(?:^|[\s:\]])(?:\w+\.)*AssertionError\b")
# Library frames that only pass a call on (nn.Module's __call__, decorators, timing wrappers).
_DISPATCH = re.compile(
    r"^(?:_call_impl|_wrapped_call_impl|__call__|wrapper|inner|wrapped|_fn|decorate_context|"
    r"log_wrapper|wrapped_func|wrapped_fn|_wrapper)$"
)
# Library modules that only hand a request to the CUDA runtime (``torch.cuda.set_device``,
# ``torch.cuda.device``): an error raised there is about what their caller asked for.
_RUNTIME_API = re.compile(r"/torch/cuda/__init__\.py$")


@dataclass(frozen=True, slots=True)
class Frame:
    """One frame: its file, its function and whose code it is (``package``: a library's top-level
    package, :data:`USER` or :data:`STDLIB`)."""

    path: str
    function: str
    package: str


def frames_of(text: str, libraries: frozenset[str]) -> list[Frame]:
    """The Python frames a record's text holds, outermost first (a faulthandler dump's: the
    crashed thread's, turned so)."""
    out = []
    for line in call_order(text):
        m = FRAME.search(line) or _RICH_FRAME.search(line)
        if m is not None:
            path = m.group("path").replace("\\", "/")
            out.append(Frame(path, m.group("func"), package_of(path, libraries)))
    return out


#: Scripts a library writes beside what it saved, run from there: DeepSpeed copies its
#: ``utils/zero_to_fp32.py`` into every checkpoint folder (``engine._copy_recovery_script``).
_COPIED_SCRIPTS = {"zero_to_fp32.py": "deepspeed"}


def package_of(path: str, libraries: frozenset[str]) -> str:
    """Whose code a file is: a library's top-level package, :data:`STDLIB` or :data:`USER`."""
    copied = _COPIED_SCRIPTS.get(path.rsplit("/", 1)[-1])
    if copied is not None:
        return copied
    installed = _INSTALLED.search(path)
    if installed is not None:
        return installed.group(1).split(".")[0]
    if _STDLIB_PATH.search(path):
        return STDLIB
    for part in path.split("/")[:-1]:
        if part in libraries:
            return part
    return USER


def refine(category: str, text: str, lexicon: Lexicon) -> str:
    """The category of a generic error from whose code raised it (see the module docstring):
    ``category`` when the frames say nothing or the user's code raised it; an assertion on the
    run's settings (``assert args.batch_size % len(devices) == 0``) is the configuration,
    whoever's code checked it."""
    if _checks_settings(text):
        return "user/config"
    frames = frames_of(text, lexicon.libraries)
    at = _raising(frames)
    if at is None:
        return category
    frame = frames[at]
    if lexicon.config_functions is not None and lexicon.config_functions.search(frame.function):
        return "user/config"
    if frame.package == USER:
        return category
    if _API_MISMATCH.search(text):
        # A library calling another (or itself) with an argument its installed version does not
        # take: the versions do not fit (the user's own call site would be the last frame).
        return "user/software-incompatibility"
    return "framework"


#: A module that lacks what its caller asked of it, by the module's dotted name; or a package's
#: own Python submodule missing ("No module named 'deepspeed.runtime.superoffload'": the package
#: shipped without it) — not a compiled extension the install did not build ("apex.amp_C",
#: "…_cuda", "…_ext"), which is the user's build.
_MODULE_LACKS = re.compile(
    r"module '(\w+)(?:\.\w+)*' has no attribute '"
    r"|No module named '(\w+)(?:\.\w+)*\.(?!\w*(?:_C|_cuda|_ext|_lib|_cpp|_kernels?)')\w+'"
)


def own_module(text: str, lexicon: Lexicon) -> bool:
    """Whether a record's "module 'P.x' has no attribute" (or "No module named 'P.x'") was
    raised in package P's own code: a library's modules disagreeing with each other (DeepSpeed's
    engine asking its own sequence parallel module for a function it does not have, importing a
    subpackage its release left out) is a bug in that library, not two installed versions that
    do not fit."""
    lacks = list(_MODULE_LACKS.finditer(text))
    if not lacks:
        return False
    # (the frame that asked: a module's own __getattr__ raising for it is not who asked)
    frames = [f for f in frames_of(text, lexicon.libraries) if f.function != "__getattr__"]
    at = _raising(frames)
    last = lacks[-1]
    return at is not None and frames[at].package == (last.group(1) or last.group(2))


def _checks_settings(text: str) -> bool:
    """Whether a record's innermost frame raised an ``AssertionError`` from an ``assert`` on
    the run's arguments or configuration (the source line the traceback printed under it)."""
    lines = [line for line in text.splitlines() if line.strip()]
    frames = [(i, m) for i, line in enumerate(lines) if (m := FRAME_HEAD.search(line))]
    if not frames:
        return False
    at, frame = frames[-1]
    rest = lines[at + 1 :]
    under = list(itertools.takewhile(lambda line: under_frame(frame, line), rest))
    if len(under) == len(rest) or _ASSERTION.search(rest[len(under)]) is None:
        return False
    return any(_SETTINGS_ASSERT.match(line[frame.start() :].strip()) for line in under)


def _raising(frames: Sequence[Frame]) -> int | None:
    """The index of the frame an error is blamed on: the last one that is neither the
    interpreter's, a library's call dispatch nor torch's hand-over to the CUDA runtime."""
    for i in range(len(frames) - 1, -1, -1):
        f = frames[i]
        if f.package == STDLIB or (f.package != USER and _DISPATCH.match(f.function)):
            continue
        if f.package != USER and _RUNTIME_API.search(f.path):
            continue
        return i
    return None
