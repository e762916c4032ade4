"""The embedded cluster: an ``osmem-server`` process that L4 starts, uses and stops itself.

The server is given our pid (``--parent-pid``) and a stdin pipe, so it exits when we do — also on
Ctrl-C, an exception, SIGTERM or ``kill -9`` — and never outlives the command as an orphan.
``l4 cluster up`` keeps one in the foreground and records its URL in a state file, so that other
``l4`` commands without a configured URL use it instead of starting their own.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import tempfile
import threading
import urllib.request
from pathlib import Path
from types import TracebackType
from typing import IO

from osmem_server import OsmemError, resolve_binary

from l4_plugin.errors import EmbeddedClusterError

STATE_FILE = "cluster.json"


class EmbeddedCluster:
    """A running osmem-server; use as a context manager or call ``start``/``stop``."""

    def __init__(
        self,
        *,
        startup_timeout: float = 30.0,
        addr: str | None = None,
        log_dir: Path | None = None,
    ) -> None:
        self.startup_timeout = startup_timeout
        self.addr = addr
        self.log_dir = log_dir
        self._process: subprocess.Popen[str] | None = None
        self._url: str | None = None
        self._log: IO[str] | None = None
        self._reader: threading.Thread | None = None

    @property
    def url(self) -> str:
        if self._url is None:
            raise EmbeddedClusterError("the embedded cluster is not running")
        return self._url

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process else None

    def alive(self) -> bool:
        """True while the server process runs."""
        return self._process is not None and self._process.poll() is None

    def start(self) -> EmbeddedCluster:
        """Start the server and wait until it reports its URL; raise EmbeddedClusterError
        (and leave no process behind) otherwise."""
        binary = _binary()
        args = [binary, "--parent-pid", str(os.getpid()), "--no-ja"]
        if self.addr:
            args += ["--addr", self.addr]
        # The server's own chatter goes to a log file, not the user's terminal; its last line is
        # quoted when it fails to start.
        self._log = tempfile.TemporaryFile("w+", prefix="osmem-", suffix=".log")  # noqa: SIM115
        try:
            self._process = subprocess.Popen(
                args,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=self._log,
                text=True,
            )
        except OSError as exc:
            self._close_log()
            raise EmbeddedClusterError(
                f"cannot start the embedded cluster ({binary}): {exc.strerror}"
            ) from None
        ready: dict[str, str] = {}
        event = threading.Event()
        self._reader = threading.Thread(target=self._read_ready, args=(ready, event), daemon=True)
        self._reader.start()
        event.wait(self.startup_timeout)
        if "url" not in ready:
            # stdout closed without a URL: the server is exiting; reap it to learn its status.
            try:
                code: int | None = self._process.wait(timeout=2 if event.is_set() else 0)
            except subprocess.TimeoutExpired:
                code = None
            self._kill()
            why = (
                f"osmem-server exited with status {code}"
                if code is not None
                else f"osmem-server did not report ready within {self.startup_timeout:g} s"
            )
            detail = self._last_log_line()
            self._close_log()
            raise EmbeddedClusterError(
                f"cannot start the embedded cluster ({binary}): {why}"
                + (f": {detail}" if detail else "")
            )
        self._url = ready["url"]
        return self

    def _read_ready(self, ready: dict[str, str], event: threading.Event) -> None:
        assert self._process is not None and self._process.stdout is not None
        stdout = self._process.stdout
        try:
            for line in stdout:
                try:
                    msg = json.loads(line)
                except ValueError:
                    continue
                if isinstance(msg, dict) and "url" in msg:
                    ready["url"] = str(msg["url"])
                    break
        finally:
            # Wakes start() at once: with the URL, or because the server exited.
            event.set()
        # Keep draining so a chatty server never blocks on a full pipe; the pipe is closed
        # once the server has exited (end of file).
        with contextlib.suppress(OSError, ValueError):
            for _ in stdout:
                pass
        stdout.close()

    def _last_log_line(self) -> str:
        if self._log is None:
            return ""
        self._log.seek(0)
        lines = [ln.strip() for ln in self._log.read().splitlines() if ln.strip()]
        return lines[-1][:300] if lines else ""

    def _close_log(self) -> None:
        if self._log is not None:
            self._log.close()
            self._log = None

    def _kill(self) -> None:
        proc = self._process
        if proc is None:
            return
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        with contextlib.suppress(OSError):
            if proc.stdin:
                proc.stdin.close()
        self._join_reader()

    def _join_reader(self) -> None:
        """Wait for the stdout reader, which closes the pipe at the server's end of file."""
        if self._reader is not None:
            self._reader.join(timeout=5)
            self._reader = None

    def stop(self, grace: float = 5.0) -> None:
        """Stop the server (idempotent): close its stdin, then kill it after ``grace`` s."""
        proc = self._process
        if proc is None:
            return
        # Closing stdin is the server's signal to stop (and the pipe is closed either way).
        with contextlib.suppress(OSError):
            if proc.stdin:
                proc.stdin.close()
        if proc.poll() is None:
            try:
                proc.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self._join_reader()
        self._process = None
        self._url = None
        self._close_log()

    def __enter__(self) -> EmbeddedCluster:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


def _binary() -> str:
    try:
        binary = resolve_binary()
    except OsmemError as exc:
        raise EmbeddedClusterError(
            f"cannot start the embedded cluster: {exc} (hint: pip install osmem-server, "
            "or set L4_ES_URL to use a real cluster)"
        ) from None
    if not os.path.isfile(binary) or not os.access(binary, os.X_OK):
        raise EmbeddedClusterError(
            f"cannot start the embedded cluster: osmem-server binary {binary} is missing or "
            "not executable (hint: reinstall osmem-server or fix OSMEM_SERVER_BIN)"
        )
    return binary


def write_state(state_dir: Path, url: str, pid: int) -> Path:
    """Record the URL of a long-running embedded cluster (``l4 cluster up``)."""
    state_dir.mkdir(parents=True, exist_ok=True)
    path = state_dir / STATE_FILE
    path.write_text(json.dumps({"url": url, "pid": pid, "owner": os.getpid()}) + "\n")
    return path


def clear_state(state_dir: Path, url: str) -> None:
    """Remove the state file if it still describes ``url``."""
    path = state_dir / STATE_FILE
    try:
        if json.loads(path.read_text()).get("url") == url:
            path.unlink()
    except (OSError, ValueError):
        return


def running_cluster_url(state_dir: Path) -> str | None:
    """The URL of a live ``l4 cluster up`` server, or None (stale files are ignored)."""
    path = state_dir / STATE_FILE
    try:
        state = json.loads(path.read_text())
        pid, url = int(state["pid"]), str(state["url"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    try:
        os.kill(pid, 0)
    except OSError:
        return None
    try:
        with urllib.request.urlopen(url + "/", timeout=2) as resp:
            if resp.status == 200:
                return url
    except OSError:
        return None
    return None
