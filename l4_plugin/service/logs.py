"""Structured service logs: one line per event, plain text or JSON (``--log-json``).

Every record carries an ``event`` (``job.diagnosed``, ``cluster.unreachable``…) and, where there
is one, the job id and the task, so a log pipeline can follow one job across services. JSON lines
use ECS names (``@timestamp``, ``log.level``, ``message``) and ours under ``l4.*``.
"""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime
from typing import Any

from l4_plugin.display import safe_text
from l4_plugin.store import fields as F

LOGGER_NAME = "l4.service"


def _fields(record: logging.LogRecord) -> dict[str, Any]:
    fields = getattr(record, "l4", None)
    return dict(fields) if isinstance(fields, dict) else {}


class JsonFormatter(logging.Formatter):
    """``{"@timestamp", "log.level", "message", "event.action", "l4.job.id", …}`` per line."""

    def format(self, record: logging.LogRecord) -> str:
        fields = _fields(record)
        doc: dict[str, Any] = {
            "@timestamp": datetime.fromtimestamp(record.created, UTC).isoformat(
                timespec="milliseconds"
            ),
            "log.level": record.levelname.lower(),
            "message": record.getMessage(),
        }
        event = fields.pop("event", None)
        if event:
            doc["event.action"] = event
        for key, value in fields.items():
            doc[f"{F.ROOT}.{key}"] = value
        if record.exc_info:
            doc["error.stack_trace"] = self.formatException(record.exc_info)
        return json.dumps(doc, default=str)


class TextFormatter(logging.Formatter):
    """``2026-01-02T03:04:05Z INFO [diagnose] job=ID message``."""

    def format(self, record: logging.LogRecord) -> str:
        fields = _fields(record)
        when = datetime.fromtimestamp(record.created, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        task = fields.get("task")
        job = fields.get("job.id")
        parts = [when, f"{record.levelname:<7}"]
        if task:
            parts.append(f"[{task}]")
        if job:
            parts.append(f"job={job}")
        parts.append(record.getMessage())
        line = safe_text(" ".join(parts))
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        return line


def setup_logging(*, json_lines: bool, level: int = logging.INFO) -> logging.Logger:
    """The service logger, writing to stderr in the chosen format (idempotent)."""
    logger = logging.getLogger(LOGGER_NAME)
    for handler in list(logger.handlers):
        logger.removeHandler(handler)
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if json_lines else TextFormatter())
    logger.addHandler(handler)
    logger.setLevel(level)
    logger.propagate = False
    # APScheduler logs every run at INFO; keep only its warnings (missed runs, errors).
    logging.getLogger("apscheduler").setLevel(logging.WARNING)
    return logger


def log(
    logger: logging.Logger,
    level: int,
    event: str,
    message: str,
    *,
    exc_info: bool = False,
    **fields: Any,
) -> None:
    """Log ``message`` as ``event`` with structured ``fields`` (``job_id`` → ``l4.job.id``)."""
    extra: dict[str, Any] = {"event": event}
    for key, value in fields.items():
        if value is None:
            continue
        extra["job.id" if key == "job_id" else key] = value
    logger.log(level, message, extra={"l4": extra}, exc_info=exc_info)
