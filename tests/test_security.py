"""Hostile input (issue 15): what L4 reads, what it bounds, what it redacts (see SECURITY.md).

Each test reproduces one way a small or malicious input used to hurt L4 and checks the one-line
error or warning that replaces it. Bombs are small inputs that would blow up without the limit.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import pytest

from l4_plugin import cli
from l4_plugin.analysis.lexicon import Lexicon
from l4_plugin.config import load_settings
from l4_plugin.errors import ConfigError, IngestError, RuleError
from l4_plugin.ingest.jobdir import job_meta
from l4_plugin.ingest.masking import parse_rules
from l4_plugin.ingest.pipeline import ingest_job
from l4_plugin.jobid import check_job_id
from l4_plugin.rules import render
from l4_plugin.rules.loader import load_file
from l4_plugin.service.registry import register_job
from l4_plugin.store import Store
from l4_plugin.store.documents import job_doc_id, source_field

LOG = "2024-05-01 10:00:00 INFO iteration 1/10 | loss 2.0\n"

# 10 levels of 10 aliases: a few hundred bytes that expand to 10**10 values.
BOMB = "a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]\n" for i in range(1, 10)
)


@dataclass(frozen=True)
class Result:
    returncode: int
    stdout: str
    stderr: str


@pytest.fixture
def l4(
    store: Store,
    osmem_url: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> object:
    """`l4 ARGS` in this process against the session server, with the test's index prefix."""
    for key in list(os.environ):
        if key.startswith("L4_"):
            monkeypatch.delenv(key)
    monkeypatch.setenv("L4_ES_URL", osmem_url)
    monkeypatch.setenv("L4_INDEX_PREFIX", store.names.prefix)
    monkeypatch.setenv("L4_STATE_DIR", str(tmp_path / "state"))

    def run(*args: str) -> Result:
        capsys.readouterr()
        code = cli.main(list(args))
        captured = capsys.readouterr()
        return Result(code, captured.out, captured.err)

    return run


def _job(root: Path, job_yaml: str | bytes | None = None) -> Path:
    (root / "node-1").mkdir(parents=True)
    (root / "node-1" / "rank0.log").write_text(LOG * 3)
    if isinstance(job_yaml, bytes):
        (root / "job.yaml").write_bytes(job_yaml)
    elif job_yaml is not None:
        (root / "job.yaml").write_text(job_yaml)
    return root


def _rule(tmp_path: Path, **fields: str) -> Path:
    """A valid rule file with some fields replaced (values are YAML text)."""
    base = {
        "id": "port-busy",
        "title": "Port busy",
        "status": "draft",
        "category": "user/misoperation",
        "severity": "low",
        "description": "x",
        "role": "cause",
        "scope": "job",
        "detection": "\n  busy:\n    message|contains: Address already in use\n  condition: busy",
        "diagnosis": "'busy on {{ nodes | join(\", \") }}'",
    }
    base.update(fields)
    path = tmp_path / "user" / "misoperation" / "port-busy.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(f"{k}: {v}\n" for k, v in base.items()))
    return path


# -- 3. bounded YAML ------------------------------------------------------------------------------
def test_job_yaml_alias_bomb_is_a_located_error_before_anything_is_written(
    store: Store, tmp_path: Path
) -> None:
    job = _job(
        tmp_path / "job", "id: bomb\nstatus: failed\nconfig:\n  " + BOMB.replace("\n", "\n  ")
    )
    with pytest.raises(
        IngestError, match=r"job\.yaml:\d+: invalid YAML in job\.yaml: more than 100,000"
    ):
        ingest_job(store, job)
    assert store.get(store.names.jobs, job_doc_id("bomb")) is None
    store.refresh(store.names.events)
    assert store.count(store.names.events) == 0


def test_rule_file_alias_bomb_is_reported_by_rules_check(l4: object, tmp_path: Path) -> None:
    path = _rule(tmp_path)
    path.write_text(path.read_text() + "bomb:\n  " + BOMB.replace("\n", "\n  "))
    res = l4("rules", "check", str(path))  # type: ignore[operator]
    assert res.returncode == 1
    assert f"{path}:" in res.stdout + res.stderr
    assert "more than 100,000 values once aliases are expanded" in res.stdout + res.stderr
    assert "MemoryError" not in res.stdout + res.stderr


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("a: &a [*a]\n", r"x\.yaml:1: invalid YAML in config file: an alias refers to the node"),
        ("a: " + "[" * 100 + "]" * 100 + "\n", r"x\.yaml:1: .*nesting deeper than 64 levels"),
        ("es_url: http://a\nes_url: http://b\n", r"x\.yaml:2: duplicate key 'es_url'"),
    ],
)
def test_config_file_limits(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "x.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=message):
        load_settings(path)


def test_yaml_document_size_limit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from l4_plugin import yamldoc

    monkeypatch.setattr(yamldoc, "MAX_YAML_BYTES", 100)
    path = tmp_path / "big.yaml"
    path.write_text("random_state: 1\n" + "#" * 200 + "\n")
    with pytest.raises(ConfigError, match=r"config file too large — .*big\.yaml — over 100 bytes"):
        load_settings(path)


def test_lexicon_and_masking_bombs_are_located(tmp_path: Path) -> None:
    lexicon = tmp_path / "lexicon.yaml"
    lexicon.write_text(BOMB)
    with pytest.raises(ConfigError, match=r"lexicon\.yaml:\d+: invalid YAML .*more than 100,000"):
        Lexicon.load(lexicon)
    with pytest.raises(ConfigError, match=r"masking\.yaml:\d+ — more than 100,000 values"):
        parse_rules(BOMB + "rules: []\n", "masking.yaml")


# -- 3. bounded templates -------------------------------------------------------------------------
def test_nested_range_loops_stop_at_the_time_budget(
    l4: object, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(render, "RENDER_SECONDS", 0.05)
    loops = "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}"
    path = _rule(tmp_path, diagnosis=f"'{loops}'")
    res = l4("rules", "check", str(path))  # type: ignore[operator]
    assert res.returncode == 1
    assert (
        f"{path}:13: diagnosis: template exceeds its budget: rendering took longer than 0.05 s"
        in (res.stdout + res.stderr)
    )


@pytest.mark.parametrize(
    ("template", "message"),
    [
        ("{{ 'x' * 10**9 }}", r"'\*' would build 1,000,000,000 characters"),
        ("{{ 10 ** 1000000000 }}", r"'\*\*' would build a 4,000,000,000-bit number"),
        (
            "{% set n = namespace(s='x'*50000) %}{% for i in range(40) %}{% set n.s = n.s ~ n.s %}"
            "{% endfor %}",
            r"'~' would build 200,000 characters",
        ),
        (
            "{% set n = namespace(s='x'*50000) %}{% for i in range(40) %}{% set n.s = n.s + n.s %}"
            "{% endfor %}",
            r"'\+' would build",
        ),
        ("{{ 'x' | center(1000000000) }}", r"center would build 1,000,000,000"),
        ("{{ 'x'.ljust(1000000000) }}", r"str\.ljust would build"),
        ("{{ '{:>1000000000}'.format('x') }}", r"format width 1000000000"),
        ("{{ '%*s' % (1000000000, 'x') }}", r"format width 1000000000"),
        ("{{ '%.1000000000f' % 1.0 }}", r"format width 1000000000"),
        ("{{ '{:5.1000000000f}'.format(1.0) }}", r"format width 1000000000"),
        ("{{ (['x' * 50000] * 1000) | join }}", r"join would build 50,000,000"),
        ("{{ nodes | batch(1000000000, 'x') | list }}", r"batch would build"),
        ("{% for i in range(100000) %}xxxxxxxxxx{% endfor %}", r"rendered text is over 20,000"),
        ("{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}", r"recurses too deeply"),
    ],
)
def test_template_budgets(template: str, message: str) -> None:
    with pytest.raises(render.TemplateProblem, match=message):
        render.check_template(template, ["busy"])


def test_render_at_run_time_reports_the_budget_instead_of_raising() -> None:
    text = render.render("{% for i in range(100000) %}xxxxxxxxxx{% endfor %}", {})
    assert text == "(template could not be rendered: rendered text is over 20,000 characters)"
    assert render.render("{{ a ~ b }}: {{ '%d lines' % n }}", {"a": "x", "b": "y", "n": 10**7}) == (
        "xy: 10000000 lines"
    )


def test_rule_string_product_fails_to_load(tmp_path: Path) -> None:
    path = _rule(tmp_path, remediation="\"{{ 'x' * 10**9 }}\"")
    with pytest.raises(RuleError, match=r"port-busy\.yaml:\d+: remediation: .*'\*' would build"):
        load_file(path)


# -- 4. validated metadata ------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("id: [1, 2]\n", r"invalid job id — .*job\.yaml:1: id — <list>: must be a string"),
        ("id: {a: 1}\n", r"invalid job id — .*job\.yaml:1: id — <dict>: must be a string"),
        ("id: true\n", r"invalid job id — .*job\.yaml:1: id — <bool>: must be a string"),
        ("id: ' '\n", r"invalid job id — .*job\.yaml:1: id — ' ': is empty"),
        ("id: a\nid: b\n", r"job\.yaml:2: duplicate key 'id' in job\.yaml"),
        ("id: a\nowner: me\n", r"job\.yaml:2: unknown key 'owner' in job\.yaml — allowed: config"),
        ("status: [failed]\n", r"job\.yaml:1: status: must be one of .*got list"),
        ("config: [a, b]\n", r"job\.yaml:1: config: must be a mapping .*got list"),
        (
            "config:\n  gpus: [{a: 1}]\n",
            r"job\.yaml:1: config\.gpus\[0\]: must be a string or number",
        ),
    ],
)
def test_job_yaml_schema(tmp_path: Path, text: str, message: str) -> None:
    job = _job(tmp_path / "job", text)
    with pytest.raises(IngestError, match=message):
        job_meta(job)


def test_job_yaml_integer_id_and_non_utf8(tmp_path: Path) -> None:
    assert job_meta(_job(tmp_path / "a", "id: 4242\n")).id == "4242"
    job = _job(tmp_path / "b", b"id: a\nconfig:\n  model: caf\xe9\n")
    with pytest.raises(IngestError, match=r"job\.yaml is not UTF-8 — .*job\.yaml:3 — byte 0xe9"):
        job_meta(job)


@pytest.mark.parametrize("bad", ["", " ", " a", "a\x1b[31m", "a\u202eb", "x" * 257])
def test_one_job_id_rule(bad: str) -> None:
    with pytest.raises(ConfigError, match=r"invalid job id — here — "):
        check_job_id(bad, "here")
    assert check_job_id('Job/42 "A*B"?', "here") == 'Job/42 "A*B"?'


@pytest.mark.parametrize("bad", ["", " "])
def test_cli_rejects_blank_job_ids(l4: object, tmp_path: Path, bad: str) -> None:
    job = _job(tmp_path / "job")
    for args in (
        ("ingest", str(job), "--job-id", bad),
        ("diagnose", str(job), "--job-id", bad),
        ("analyze", bad),
        ("analyze", "ok", "--baseline", bad),
        ("report", bad),
        ("job", "register", bad, "--status", "running"),
        ("job", "status", bad),
        ("rules", "match", bad),
        ("rules", "new", "--from-job", bad),
    ):
        res = l4(*args)  # type: ignore[operator]
        assert res.returncode == 2, args
        assert "Invalid value for" in res.stderr and "is empty" in res.stderr, (args, res.stderr)


def test_registry_validates_job_ids(store: Store) -> None:
    with pytest.raises(ConfigError, match=r"invalid job id — l4 job register — 'a\\nb'"):
        register_job(store, "a\nb", "running")


# -- 2. confinement and size limits ---------------------------------------------------------------
def _hostile_job(root: Path) -> Path:
    """A job whose links point out of it, at /dev/zero, at a FIFO, and once inside it."""
    (root / "outside").mkdir(parents=True)
    (root / "outside" / "shadow").write_text("root:SECRETHASH:19000:0:99999:7:::\n")
    job = _job(root / "job")
    node = job / "node-1"
    (node / "rank1.log").symlink_to(root / "outside" / "shadow")
    (node / "rank2.log").symlink_to("/dev/zero")
    os.mkfifo(node / "rank3.log")
    (job / "shared").mkdir()
    (job / "shared" / "rank4.data").write_text("2024-05-01 10:00:01 ERROR INSIDE_LINK reached\n")
    (node / "rank4.log").symlink_to("../shared/rank4.data")
    return job


def _lines_matching(store: Store, text: str) -> int:
    store.refresh(store.names.lines)
    return store.count(store.names.lines, {"match_phrase": {"message": text}})


def test_only_regular_files_inside_the_job_are_read(store: Store, tmp_path: Path) -> None:
    job = _hostile_job(tmp_path)
    summary = ingest_job(store, job, job_id="hostile", full=True)
    assert summary.skipped_files == 3
    skipped = "\n".join(summary.problems)
    assert f"skipped node-1/rank1.log: a link to {tmp_path}/outside/shadow, outside the job" in (
        skipped
    )
    assert "skipped node-1/rank2.log: a link to /dev/zero, outside the job directory" in skipped
    assert "skipped node-1/rank3.log: a FIFO, not a regular file" in skipped
    assert _lines_matching(store, "SECRETHASH") == 0
    assert _lines_matching(store, "INSIDE_LINK") == 1
    doc = store.get(store.names.jobs, job_doc_id("hostile"))
    assert doc is not None and source_field(doc.source, "l4.job.skipped_files") == 3


def test_cli_warns_once_per_skipped_file(l4: object, tmp_path: Path) -> None:
    job = _hostile_job(tmp_path)
    res = l4("ingest", str(job), "--job-id", "hostile")  # type: ignore[operator]
    assert res.returncode == 0, res.stderr
    warnings = [line for line in res.stderr.splitlines() if line.startswith("warning: skipped")]
    assert len(warnings) == 3
    assert "warning: skipped node-1/rank3.log: a FIFO, not a regular file" in warnings


@pytest.mark.parametrize(
    ("target", "message"),
    [
        ("outside", r"job\.yaml is a link out of the job directory — .*job\.yaml — refused"),
        ("/dev/zero", r"job\.yaml is a link out of the job directory"),
    ],
)
def test_job_yaml_links_are_confined(tmp_path: Path, target: str, message: str) -> None:
    (tmp_path / "outside.yaml").write_text("id: stolen\n")
    job = _job(tmp_path / "job")
    (job / "job.yaml").symlink_to(tmp_path / "outside.yaml" if target == "outside" else target)
    with pytest.raises(IngestError, match=message):
        job_meta(job)


def test_job_yaml_fifo_is_refused(tmp_path: Path) -> None:
    job = _job(tmp_path / "job")
    os.mkfifo(job / "job.yaml")
    with pytest.raises(IngestError, match=r"cannot read job\.yaml — .*job\.yaml — not a regular"):
        job_meta(job)


def test_size_limits_and_the_flags_that_raise_them(l4: object, tmp_path: Path) -> None:
    job = _job(tmp_path / "job")
    (job / "node-1" / "rank1.log").write_text(LOG * 100)  # 5 KB
    res = l4("ingest", str(job), "--job-id", "sized", "--max-file-size", "1K")  # type: ignore[operator]
    assert res.returncode == 0, res.stderr
    assert (
        "warning: skipped node-1/rank1.log: 5.0 KiB, over the per-file limit of 1.0 KiB — hint: "
        "raise --max-file-size"
    ) in res.stderr
    res = l4("ingest", str(job), "--job-id", "sized", "--max-job-size", "2K")  # type: ignore[operator]
    assert res.returncode == 1
    assert "\nerror: job too large — " in "\n" + res.stderr
    assert "over the per-job limit of 2.0 KiB — hint: raise --max-job-size" in res.stderr
    res = l4("ingest", str(job), "--job-id", "sized", "--max-job-size", "1M")  # type: ignore[operator]
    assert res.returncode == 0 and "skipped" not in res.stderr
    res = l4("ingest", str(job), "--max-file-size", "lots")  # type: ignore[operator]
    assert res.returncode == 1
    assert "error: invalid setting max_file_size (command line): 'lots'" in res.stderr


def test_size_limit_from_the_environment(
    l4: object, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    job = _job(tmp_path / "job")
    monkeypatch.setenv("L4_MAX_JOB_SIZE", "10")
    res = l4("ingest", str(job), "--job-id", "env")  # type: ignore[operator]
    assert res.returncode == 1 and "over the per-job limit of 10 B" in res.stderr


def test_gzip_is_bounded_by_its_decompressed_size(store: Store, tmp_path: Path) -> None:
    import gzip

    from l4_plugin.ingest.jobdir import ReadLimits

    job = _job(tmp_path / "job")
    with gzip.open(job / "node-1" / "rank1.log.gz", "wt") as fh:
        fh.write(LOG * 20_000)  # 1 MB of text, a few KB on disk
    summary = ingest_job(store, job, job_id="gz", limits=ReadLimits(max_file_size=64 * 1024))
    assert any(
        "log file over the per-file limit — node-1/rank1.log.gz — more than 64.0 KiB" in p
        for p in summary.problems
    )
    assert 0 < summary.lines < 20_000


def test_baseline_directories_are_confined_too(l4: object, tmp_path: Path) -> None:
    job = _job(tmp_path / "job", "id: failed-1\nstatus: failed\n")
    base = _job(tmp_path / "base", "id: base-1\nstatus: succeeded\n")
    (tmp_path / "secret").write_text("SECRETHASH\n")
    (base / "node-1" / "rank9.log").symlink_to(tmp_path / "secret")
    res = l4("diagnose", str(job), "--baseline", str(base))  # type: ignore[operator]
    assert res.returncode == 0, res.stderr
    assert f"warning: skipped node-1/rank9.log: a link to {tmp_path}/secret, outside" in res.stderr


# -- 6. binary files and terminal output ----------------------------------------------------------
def test_binary_files_are_skipped_and_counted(store: Store, tmp_path: Path) -> None:
    import random

    job = _job(tmp_path / "job")
    (job / "node-1" / "rank1.log").write_bytes(random.Random(0).randbytes(50_000))
    # Not binary: Latin-1 text, and a crash's hole of NULs in a text log.
    (job / "node-1" / "rank2.log").write_bytes(b"2024-05-01 10:00:02 INFO caf\xe9 ok\n" * 50)
    (job / "node-1" / "rank3.log").write_bytes(
        LOG.encode() + b"\x00" * 4096 + b"2024-05-01 10:00:03 INFO after hole\n"
    )
    summary = ingest_job(store, job, job_id="binary")
    assert summary.skipped_files == 1
    assert any(p.startswith("skipped node-1/rank1.log: binary content (") for p in summary.problems)
    assert summary.new_templates < 10  # the random bytes made ~766 templates before
    doc = store.get(store.names.jobs, job_doc_id("binary"))
    assert doc is not None and source_field(doc.source, "l4.job.skipped_files") == 1


@pytest.mark.parametrize(
    ("raw", "shown"),
    [
        ("a\x1b[31mred\x1b[0m", "ared"),
        ("t\x1b]0;pwned\x07itle", "title"),
        ("x\x1b]8;;http://evil\x1b\\link\x1b]8;;\x1b\\", "xlink"),
        ("c1\x9b2Jz\x85", "c1z"),
        ("bell\x07 bs\x08 del\x7f", "bell bs del"),
        ("rtl \u202eevil\u202c", "rtl evil"),
        ("tab\tand\nnewline stay", "tab\tand\nnewline stay"),
    ],
)
def test_safe_text(raw: str, shown: str) -> None:
    from l4_plugin.display import safe_text

    assert safe_text(raw) == shown


def test_log_escapes_never_reach_the_terminal(l4: object, store: Store, tmp_path: Path) -> None:
    job = _job(tmp_path / "job", "id: esc-1\nstatus: failed\n")
    evil = "2024-05-01 10:00:05 ERROR boom \x1b]0;pwned\x07\x1b[2J\x1b[31mCUDA error\x9b0m\n"
    (job / "node-1" / "rank0.log").write_text(LOG * 3 + evil)
    res = l4("diagnose", str(job), "--json", str(tmp_path / "r.json"))  # type: ignore[operator]
    assert res.returncode == 0, res.stderr
    assert "boom" in res.stdout
    for ch in ("\x1b", "\x07", "\x9b"):
        assert ch not in res.stdout and ch not in res.stderr
    # The stored line keeps what was logged.
    store.refresh(store.names.lines)
    hits = store.search(store.names.lines, {"query": {"match_phrase": {"message": "boom"}}})
    assert "\x1b[2J" in hits["hits"]["hits"][0]["_source"]["message"]


def test_errors_are_cleaned_too(l4: object, tmp_path: Path) -> None:
    res = l4("ingest", str(tmp_path / "no\x1b[2Jsuch"), "--job-id", "ok")  # type: ignore[operator]
    assert res.returncode == 1
    assert f"error: job directory not found — {tmp_path}/nosuch\n" in res.stderr
    assert "\x1b" not in res.stderr


# -- 5. redaction ---------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("url", "redacted", "problem"),
    [
        ("http://user:pw@[::1", "http://***@[::1", "it does not parse (Invalid IPv6 URL)"),
        ("ftp://user:pw@host", "ftp://***@host", "ftp:// is not supported"),
        ("http://user:pw@host:abc", "http://***@host:abc", "the port is not a number"),
        ("https://user:pw@host:99999", "https://***@host:99999", "the port is not a number"),
        ("user:pw@host:9200", "***@host:9200", "it does not start with http:// or https://"),
        ("https://u:p@a@host:9200/x", "https://***@host:9200/x", None),
    ],
)
def test_urls_are_redacted_even_when_they_do_not_parse(
    url: str, redacted: str, problem: str | None
) -> None:
    from l4_plugin.config import redact_url

    assert redact_url(url) == redacted
    if problem is None:
        return
    with pytest.raises(ConfigError, match=r"invalid setting es_url \(command line\)") as info:
        load_settings(None, es_url=url)
    assert repr(redacted) in str(info.value) and problem in str(info.value)
    assert "pw" not in str(info.value)


def test_cli_bad_url_is_one_line_without_the_password(l4: object) -> None:
    for url, problem in (
        ("http://elastic:hunter2@[::1", "does not parse"),
        ("http://elastic:hunter2@host:port", "the port is not a number"),
    ):
        res = l4("--es-url", url, "status")  # type: ignore[operator]
        assert res.returncode == 1
        assert res.stderr.count("\n") == 1 and res.stderr.startswith(
            "error: invalid setting es_url"
        )
        assert problem in res.stderr and "hunter2" not in res.stderr + res.stdout
        assert "Traceback" not in res.stderr


def test_credentials_in_any_printed_text_are_redacted() -> None:
    from l4_plugin.display import safe_text

    text = "connect to https://elastic:hunter2@es:9200/x failed; ssh://git@host ok"
    assert safe_text(text) == "connect to https://***@es:9200/x failed; ssh://***@host ok"


def test_store_display_url_never_holds_credentials(osmem_url: str) -> None:
    from l4_plugin.store.names import IndexNames
    from l4_plugin.store.opensearch import OpenSearchStore

    url = osmem_url.replace("http://", "http://elastic:hunter2@")
    s = OpenSearchStore(url, IndexNames("tsec-l4-"))
    try:
        assert "hunter2" not in s.display_url and s.display_url.startswith("http://***@")
    finally:
        s.close()


def test_dashboards_url_errors(tmp_path: Path) -> None:
    from l4_plugin.dashboards import install

    with pytest.raises(ConfigError, match=r"invalid --url — 'http://\*\*\*@\[::1' — it does not"):
        install("http://user:pw@[::1")
    with pytest.raises(ConfigError, match=r"invalid --url — 'http://\*\*\*@kb:x' — the port"):
        install("http://user:pw@kb:x")


def test_service_skips_jobs_with_invalid_ids(
    store: Store, settings: object, caplog: pytest.LogCaptureFixture
) -> None:
    import logging

    from l4_plugin.service import tasks
    from tests.test_service_claims import context, put_job

    put_job(store, "bad\x1b[2Jid")
    put_job(store, "good")
    ctx = context(store, settings)  # type: ignore[arg-type]
    with caplog.at_level(logging.WARNING, logger="test.l4.service"):
        assert tasks.discover(ctx) == 1
    item = ctx.next_job()
    assert item is not None and item[0] == "good" and ctx.next_job() is None
    assert "skipped: the job id contains the control or format character U+001B" in caplog.text


def test_setup_adds_skipped_files_to_a_jobs_index_of_an_older_l4(store: Store) -> None:
    from typing import Any

    index = store.names.jobs
    client: Any = store.client  # type: ignore[attr-defined]
    client.indices.delete(index=index, ignore_unavailable=True)
    client.indices.delete_index_template(name=index)
    narrow = {
        "dynamic": "strict",
        "properties": {"l4": {"properties": {"job": {"properties": {"id": {"type": "keyword"}}}}}},
    }
    client.indices.create(index=index, body={"mappings": narrow})
    store.install_templates()
    store.bulk_index(index, [("j", {"l4.job.id": "j", "l4.job.skipped_files": 2})], refresh=True)
    assert store.count(index, {"term": {"l4.job.skipped_files": 2}}) == 1


def test_diagnose_checks_every_job_yaml_before_ingesting_baselines(
    l4: object, store: Store, tmp_path: Path
) -> None:
    job = _job(tmp_path / "job", "id: failed-2\nconfig:\n  " + BOMB.replace("\n", "\n  "))
    base = _job(tmp_path / "base", "id: base-2\nstatus: succeeded\n")
    res = l4("diagnose", str(job), "--baseline", str(base))  # type: ignore[operator]
    assert res.returncode == 1 and "more than 100,000 values" in res.stderr
    assert store.get(store.names.jobs, job_doc_id("base-2")) is None


def test_the_reader_checks_the_file_again_when_it_opens_it(tmp_path: Path) -> None:
    from l4_plugin.ingest.jobdir import LogFile
    from l4_plugin.ingest.sources import bounded_blocks

    fifo = tmp_path / "rank0.log"
    os.mkfifo(fifo)  # a regular file at discovery, swapped for a FIFO before it is read
    file = LogFile(fifo, "node-1/rank0.log", "node-1", 0, "rank")
    with pytest.raises(IngestError, match=r"no longer a regular file — node-1/rank0\.log"):
        next(bounded_blocks(file))
