from __future__ import annotations

from pathlib import Path

import pytest

from l4_plugin.errors import ConfigError
from l4_plugin.ingest.masking import Masker


@pytest.fixture(scope="module")
def masker() -> Masker:
    return Masker.load()


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("at 2024-05-03T10:11:12.123Z ok", "at <TS> ok"),
        ("at 2024-05-03 10:11:12,345+02:00 ok", "at <TS> ok"),
        ("HCCL(1,p):2024-05-03-10:11:12.123.456 x", "HCCL(<NUM>,p):<TS> x"),
        ("E1023 09:13:42.123456 x", "E<TS> x"),
        ("May  3 10:11:12 node-a07 kernel: x", "<TS> <HOST> kernel: x"),
        ("[12345.678901] NVRM", "[<TS>] NVRM"),
        ("peer 10.0.0.12 down", "peer <IP> down"),
        ("peer 10.0.0.12:29500 down", "peer <ADDR> down"),
        ("peer fe80::1ff:fe23:4567:890a down", "peer <IP> down"),
        ("store node-a07:29500 down", "store <ADDR> down"),
        ("ptr 0x7f3a2b", "ptr <HEX>"),
        ("id 3f2a9bc1d4e5 ok", "id <HEX> ok"),
        ("bus 0000:3b:00.0 ok", "bus <HEX> ok"),
        ("u 123e4567-e89b-12d3-a456-426614174000", "u <UUID>"),
        ("open /data/ckpt/iter_0001000/model.pt failed", "open <PATH> failed"),
        ("lr 1.5E-04 loss 2.345 n -3", "lr <NUM> loss <NUM> n <NUM>"),
        ("alloc 12.3 GiB of 512MB", "alloc <SIZE> of <SIZE>"),
        ("after 600000 ms and 12.5s", "after <DUR> and <DUR>"),
        (
            "[rank3]: x [Rank 3] y [default3]: rank 3",
            "[rank<RANK>]: x [Rank <RANK>] y [default<RANK>]: rank <RANK>",
        ),
        ("node-a07:1234:5678 [3] NCCL INFO x", "<HOST>:<NUM>:<NUM> [<NUM>] NCCL INFO x"),
        ("see https://example.com/a?b=1 now", "see <URL> now"),
        ("c10d::ProcessGroupNCCL at::Tensor", "c00d::ProcessGroupNCCL at::Tensor"),
        ("ProcessGroupNCCL.cpp:616] done.", "ProcessGroupNCCL.cpp:<NUM>] done."),
    ],
)
def test_token_kinds(masker: Masker, text: str, expected: str) -> None:
    assert masker.mask(text) == expected


def test_chunk_equals_per_line(masker: Masker) -> None:
    lines = [
        "node-a07:1234:5678 [3] NCCL INFO Channel 00/24 : 0 1 2 3",
        "",
        " [2024-05-03 10:11:12] iteration      120/    1000 | lm loss: 2.345678E+00 |",
        "May  3 10:11:12 node-a07 kernel: [12345.678901] NVRM: Xid (PCI:0000:3b:00): 79",
        "12",
        "trailing 42",
    ]
    chunk = masker.mask("\n".join(lines)).split("\n")
    assert chunk == [masker.mask(line) for line in lines]
    assert masker.mask(masker.key("\n".join(lines))) == masker.mask("\n".join(lines))


def test_bad_regex_names_rule_and_line(tmp_path: Path) -> None:
    path = tmp_path / "masking.yaml"
    path.write_text(
        "rules:\n  - name: ok\n    pattern: 'a'\n    replace: 'b'\n"
        "  - name: broken\n    pattern: '(unclosed'\n    replace: 'x'\n"
    )
    with pytest.raises(ConfigError, match=r"'broken'.*masking\.yaml:5.*\(unclosed"):
        Masker.load(path)


def test_bad_yaml_names_line(tmp_path: Path) -> None:
    path = tmp_path / "masking.yaml"
    path.write_text("rules:\n  - name: a\n    pattern: [unclosed\n")
    with pytest.raises(ConfigError, match=r"invalid YAML.*masking\.yaml:\d+"):
        Masker.load(path)


def test_rule_matching_newline_rejected(tmp_path: Path) -> None:
    path = tmp_path / "masking.yaml"
    path.write_text("rules:\n  - name: nl\n    pattern: '\\s+'\n    replace: ' '\n")
    with pytest.raises(ConfigError, match=r"'nl'.*newline.*masking\.yaml:2"):
        Masker.load(path)


def test_missing_field_and_bad_group(tmp_path: Path) -> None:
    path = tmp_path / "masking.yaml"
    path.write_text("rules:\n  - name: a\n    pattern: 'x'\n")
    with pytest.raises(ConfigError, match=r"lacks 'replace'.*masking\.yaml:2"):
        Masker.load(path)
    path.write_text("rules:\n  - name: g\n    pattern: 'x'\n    replace: '\\2'\n")
    with pytest.raises(ConfigError, match=r"'g'.*group"):
        Masker.load(path)


def test_ip_list_is_one_token() -> None:
    masker = Masker.load()
    one = masker.mask('10.11.10.1 "GET /v2/x/servers/detail HTTP/1.1" status: 200')
    two = masker.mask('10.11.10.1,10.11.21.139 "GET /v2/x/servers/detail HTTP/1.1" status: 200')
    assert one == two and one.startswith('<IP> "GET')


def test_a_number_glued_to_a_word_is_one_event_whatever_its_length() -> None:
    from l4_plugin.ingest.parser import LineParser

    parser = LineParser()
    kinds = parser.feed(
        [
            "[Torch] Checkpoint global_step22 is ready now!",
            "[Torch] Checkpoint global_step2016 is ready now!",
        ]
    )
    assert kinds[0].body == kinds[1].body == "[Torch] Checkpoint global_step0 is ready now!"
