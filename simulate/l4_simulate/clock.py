"""Timestamp formats used by the emitters (all times are UTC epoch seconds)."""

from __future__ import annotations

from datetime import UTC, datetime

_MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")
_DAYS = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")


def _dt(t: float) -> datetime:
    return datetime.fromtimestamp(t, UTC)


def iso(t: float) -> str:
    """``2024-05-03 10:11:12`` (Megatron-LM)."""
    return _dt(t).strftime("%Y-%m-%d %H:%M:%S")


def iso_ms(t: float) -> str:
    """``2024-05-03 10:11:12,345`` (Python logging, DeepSpeed)."""
    d = _dt(t)
    return f"{d:%Y-%m-%d %H:%M:%S},{d.microsecond // 1000:03d}"


def slurm(t: float) -> str:
    """``2024-05-03T10:11:12`` (slurmstepd)."""
    return _dt(t).strftime("%Y-%m-%dT%H:%M:%S")


def elastic(t: float) -> str:
    """``2024-05-03_10:11:12`` (torchrun's ChildFailedError block)."""
    return _dt(t).strftime("%Y-%m-%d_%H:%M:%S")


def c10(level: str, t: float, nanos: bool) -> str:
    """``E1023 09:13:42.123456789`` (c10/glog: month not zero-padded in torch >= 2.3)."""
    d = _dt(t)
    frac = f"{d.microsecond:06d}{(int(t * 1e9) % 1000):03d}" if nanos else f"{d.microsecond:06d}"
    month = f"{d.month}" if nanos else f"{d.month:02d}"
    return f"{level}{month}{d.day:02d} {d:%H:%M:%S}.{frac}"


def cann(t: float) -> str:
    """``2024-05-03-10:11:12.123.456`` (Ascend CANN / HCCL)."""
    d = _dt(t)
    return f"{d:%Y-%m-%d-%H:%M:%S}.{d.microsecond // 1000:03d}.{d.microsecond % 1000:03d}"


def syslog(t: float) -> str:
    """``May  3 10:11:12`` (rsyslog kern.log)."""
    d = _dt(t)
    return f"{_MONTHS[d.month - 1]} {d.day:2d} {d:%H:%M:%S}"


def dmesg_human(t: float) -> str:
    """``[Fri May  3 10:11:12 2024]`` (``dmesg -T``)."""
    d = _dt(t)
    return f"[{_DAYS[d.weekday()]} {_MONTHS[d.month - 1]} {d.day:2d} {d:%H:%M:%S} {d.year}]"


def tqdm_clock(seconds: float) -> str:
    """``03:02`` or ``1:03:02`` (tqdm elapsed / remaining)."""
    s = max(0, int(seconds))
    h, rem = divmod(s, 3600)
    m, sec = divmod(rem, 60)
    return f"{h}:{m:02d}:{sec:02d}" if h else f"{m:02d}:{sec:02d}"
