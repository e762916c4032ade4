"""The exceptions L4 raises: one base class, one subclass per concern.

Every message is written for the person at the terminal: what failed, where (file:line, field path,
index or URL), the bad value and, where there is one, a hint.
"""

from __future__ import annotations


class L4Error(Exception):
    """Base class of every error L4 reports to a user (the CLI prints it and exits 1)."""


class ConfigError(L4Error):
    """A setting, a config file or a command-line value is wrong."""


class StoreError(L4Error):
    """The cluster could not be reached or refused a request."""


class ConflictError(StoreError):
    """A conditional write lost: the document changed (``if_seq_no``) or already exists."""


class EmbeddedClusterError(StoreError):
    """The embedded osmem-server could not be started or died."""


class IngestError(L4Error):
    """A job directory or log file cannot be ingested."""


class FileCutError(IngestError):
    """A log file was read only up to a limit (its size, what it inflates to, how long it
    takes): the lines before the cut are ingested, the rest of the file is not. ``reason`` says
    which limit, in a few words; ``hint`` which setting raises it."""

    def __init__(self, path: str, reason: str, hint: str) -> None:
        self.path, self.reason, self.hint = path, reason, hint
        super().__init__(f"log file cut — {self.cut}")

    @property
    def cut(self) -> str:
        """``PATH: reason; the lines before were read — hint: …``, one line (what the job
        document and the report's notes keep of it)."""
        return f"{self.path}: {self.reason}; the lines before were read — hint: {self.hint}"

    def __reduce__(self) -> tuple[type[FileCutError], tuple[str, str, str]]:
        return FileCutError, (self.path, self.reason, self.hint)


class AnalysisError(L4Error):
    """An analysis cannot run on the given job."""


class RuleError(L4Error):
    """A fault rule is invalid; ``location`` is ``file:line`` or ``file`` and a field path."""

    def __init__(self, message: str, location: str = "") -> None:
        self.location = location
        super().__init__(f"{location}: {message}" if location else message)


class DashboardsError(L4Error):
    """Kibana / OpenSearch Dashboards could not be reached or refused the import."""
