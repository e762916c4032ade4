"""Hostile input (issue 15): what L4 reads, what it bounds, what it redacts (see SECURITY.md).

Each test reproduces one way a small or malicious input used to hurt L4 and checks the one-line
error or warning that replaces it. Bombs are small inputs that would blow up without the limit.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from l4_plugin.analysis.lexicon import Lexicon
from l4_plugin.config import load_settings
from l4_plugin.errors import ConfigError, IngestError, RuleError
from l4_plugin.ingest.jobdir import job_meta
from l4_plugin.ingest.masking import parse_rules
from l4_plugin.jobid import check_job_id
from l4_plugin.rules import render
from l4_plugin.rules.loader import load_file
from tests.security_inputs import BOMB, job_dir, rule_file

# 10 levels of 10 aliases: a few hundred bytes that expand to 10**10 values.


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
    path = rule_file(tmp_path, remediation="\"{{ 'x' * 10**9 }}\"")
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
        ("status: [failed]\n", r"job\.yaml:1: status: must be one of .*got list"),
        ("config: [a, b]\n", r"job\.yaml:1: config: must be a mapping .*got list"),
        (
            "config:\n  gpus: [{a: 1}]\n",
            r"job\.yaml:1: config\.gpus\[0\]: must be a string or number",
        ),
    ],
)
def test_job_yaml_schema(tmp_path: Path, text: str, message: str) -> None:
    job = job_dir(tmp_path / "job", text)
    with pytest.raises(IngestError, match=message):
        job_meta(job)


def test_job_yaml_integer_id_and_non_utf8(tmp_path: Path) -> None:
    assert job_meta(job_dir(tmp_path / "a", "id: 4242\n")).id == "4242"
    job = job_dir(tmp_path / "b", b"id: a\nconfig:\n  model: caf\xe9\n")
    with pytest.raises(IngestError, match=r"job\.yaml is not UTF-8 — .*job\.yaml:3 — byte 0xe9"):
        job_meta(job)


@pytest.mark.parametrize("bad", ["", " ", " a", "a\x1b[31m", "a\u202eb", "x" * 257])
def test_one_job_id_rule(bad: str) -> None:
    with pytest.raises(ConfigError, match=r"invalid job id — here — "):
        check_job_id(bad, "here")
    assert check_job_id('Job/42 "A*B"?', "here") == 'Job/42 "A*B"?'


@pytest.mark.parametrize(
    ("target", "message"),
    [
        ("outside", r"job\.yaml is a link out of the job directory — .*job\.yaml — refused"),
        ("/dev/zero", r"job\.yaml is a link out of the job directory"),
    ],
)
def test_job_yaml_links_are_confined(tmp_path: Path, target: str, message: str) -> None:
    (tmp_path / "outside.yaml").write_text("id: stolen\n")
    job = job_dir(tmp_path / "job")
    (job / "job.yaml").symlink_to(tmp_path / "outside.yaml" if target == "outside" else target)
    with pytest.raises(IngestError, match=message):
        job_meta(job)


def test_job_yaml_fifo_is_refused(tmp_path: Path) -> None:
    job = job_dir(tmp_path / "job")
    os.mkfifo(job / "job.yaml")
    with pytest.raises(IngestError, match=r"cannot read job\.yaml — .*job\.yaml — not a regular"):
        job_meta(job)


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
    from l4_plugin.urls import redact_url

    assert redact_url(url) == redacted
    if problem is None:
        return
    with pytest.raises(ConfigError, match=r"invalid setting es_url \(command line\)") as info:
        load_settings(None, es_url=url)
    assert repr(redacted) in str(info.value) and problem in str(info.value)
    assert "pw" not in str(info.value)


def test_credentials_in_any_printed_text_are_redacted() -> None:
    from l4_plugin.display import safe_text

    text = "connect to https://elastic:hunter2@es:9200/x failed; ssh://git@host ok"
    assert safe_text(text) == "connect to https://***@es:9200/x failed; ssh://***@host ok"


def test_dashboards_url_errors(tmp_path: Path) -> None:
    from l4_plugin.dashboards import install

    with pytest.raises(ConfigError, match=r"invalid --url — 'http://\*\*\*@\[::1' — it does not"):
        install("http://user:pw@[::1")
    with pytest.raises(ConfigError, match=r"invalid --url — 'http://\*\*\*@kb:x' — the port"):
        install("http://user:pw@kb:x")


def test_the_reader_checks_the_file_again_when_it_opens_it(tmp_path: Path) -> None:
    from l4_plugin.ingest.logfile import LogFile
    from l4_plugin.ingest.sources import bounded_blocks

    fifo = tmp_path / "rank0.log"
    os.mkfifo(fifo)  # a regular file at discovery, swapped for a FIFO before it is read
    file = LogFile(fifo, "node-1/rank0.log", "node-1", 0, "rank")
    with pytest.raises(IngestError, match=r"no longer a regular file — node-1/rank0\.log"):
        next(bounded_blocks(file))


def test_symlink_loops_and_utf16_or_latin1_files(tmp_path: Path) -> None:
    """Files that link to each other in a loop, directory links back up the tree, a UTF-16
    file and a Latin-1 one: discovery ends, skips the loops and the UTF-16 file (half its bytes
    are NUL) with a warning each, and reads the Latin-1 text."""
    from l4_plugin.ingest.jobdir import scan

    job = job_dir(tmp_path / "job")
    node = job / "node-1"
    (node / "rank8.log").symlink_to("rank9.log")
    (node / "rank9.log").symlink_to("rank8.log")
    (node / "up").symlink_to("..")
    (job / "node-2").symlink_to("node-1")
    (node / "rank1.log").write_bytes("2024-05-01 10:00:01 INFO utf16 line\n".encode("utf-16"))
    (node / "rank2.log").write_bytes("2024-05-01 10:00:02 INFO caf\xe9 ok\n".encode("latin-1"))
    found = scan(job)
    assert [f.relative for f in found.files] == ["node-1/rank0.log", "node-1/rank2.log"]
    assert found.skipped == [
        "skipped node-1/rank1.log: binary content (51% of the first 8.0 KiB is NUL, control "
        "bytes or not UTF-8)",
        f"skipped node-1/rank8.log: cannot open log file: Symlink loop from '{node}/rank8.log'",
        f"skipped node-1/rank9.log: cannot open log file: Symlink loop from '{node}/rank9.log'",
    ]
