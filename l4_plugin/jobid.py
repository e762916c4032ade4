"""Job ids: the one rule for what a job id may be, applied wherever one enters L4.

A job id comes from ``job.yaml``, a folder name, ``--job-id``, a ``JOB_ID`` argument, ``l4 job
register``, a shipper's field or the service's discovery. It is a field value and is hashed into
document ids (never part of an index name), so most characters are fine; what is refused is what
makes an id invisible or misleading on a terminal or in a URL: nothing at all, blanks around it,
control and format characters (newlines, escape sequences, bidirectional overrides).
"""

from __future__ import annotations

import unicodedata

from l4_plugin.errors import ConfigError, L4Error

MAX_JOB_ID = 256
_RULE = f"1 to {MAX_JOB_ID} printable characters, no spaces at either end"


def job_id_problem(value: object) -> str | None:
    """Why ``value`` is not a valid job id, or None when it is one."""
    if isinstance(value, bool) or not isinstance(value, str | int):
        return f"must be a string, got {type(value).__name__}"
    text = str(value)
    if not text.strip():
        return "is empty"
    if len(text) > MAX_JOB_ID:
        return f"is {len(text)} characters long"
    if text != text.strip():
        return "has spaces at an end"
    for ch in text:
        if unicodedata.category(ch) in ("Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp"):
            return f"contains the control or format character U+{ord(ch):04X}"
    return None


def check_job_id(value: object, where: str, error: type[L4Error] = ConfigError) -> str:
    """``value`` as a job id (an integer id becomes its decimal text); ``error`` otherwise,
    naming ``where`` it came from (``--job-id``, ``job.yaml:2: id``, ``l4 job register``)."""
    problem = job_id_problem(value)
    if problem is not None:
        plain = isinstance(value, str | int) and not isinstance(value, bool)
        shown = repr(value) if plain else f"<{type(value).__name__}>"
        if len(shown) > 80:
            shown = shown[:77] + "..."
        raise error(f"invalid job id — {where} — {shown}: {problem} — hint: {_RULE}")
    return str(value)
