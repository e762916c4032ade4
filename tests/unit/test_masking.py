from __future__ import annotations

import random
import re
from pathlib import Path

import pytest

from l4_plugin.errors import ConfigError
from l4_plugin.ingest.masking import Masker, MaskRule


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
        # Ray's log deduplication: the line the workers printed, whatever the count
        (
            "*** SIGTERM received on cpu 7 *** [repeated 17x across cluster]",
            "*** SIGTERM received on cpu <NUM> ***",
        ),
        (
            "AssertionError: 19114 is not divisible by 8 [repeated 2x across cluster] (Ray "
            "deduplicates logs by default. Set RAY_DEDUP_LOGS=0 to disable log deduplication, "
            "or see https://docs.ray.io/en/master/ray-observability/user-guides/"
            "configure-logging.html#log-deduplication for more options.)",
            "AssertionError: <NUM> is not divisible by <NUM>",
        ),
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


# No mask may split one event into several templates: the values one event prints (a size in any
# unit, a duration in any unit, an int or a float, a path of any depth...) must give one masked
# text, or at least one template.
@pytest.mark.parametrize(
    "variants",
    [
        pytest.param(
            [
                "freed 123 KB of cache",
                "freed 1.2 MB of cache",
                "freed 512MB of cache",
                "freed 12.3 GiB of cache",
                "freed 1 byte of cache",
                "freed 1,024 bytes of cache",
                "freed 0 B of cache",
            ],
            id="size",
        ),
        pytest.param(
            [
                "step took 5 ms",
                "step took 1.5 s",
                "step took 12.5s",
                "step took 250 milliseconds",
                "step took 3 min",
                "step took 2 hours",
                "step took 1 day",
                "step took 1m30s",
            ],
            id="duration",
        ),
        pytest.param(
            [
                "loss 3 at step 7",
                "loss 2.345 at step 7",
                "loss -0.5 at step 7",
                "loss +7 at step 7",
                "loss 1.5E-04 at step 7",
                "loss 1,234,567 at step 7",
            ],
            id="number",
        ),
        pytest.param(
            ["lifetime 00:02 ok", "lifetime 02:18:30 ok", "lifetime 12:00:01.5 ok"],
            id="clock",
        ),
        pytest.param(
            [
                "open /data failed",
                "open /data/ckpt/iter_0001000/model.pt failed",
                "open ./ckpt/model.pt failed",
                "open ~/ckpt/ failed",
                "open C:\\Windows\\winsxs\\cbscore.dll failed",
            ],
            id="path",
        ),
        pytest.param(["ptr 0x1 bad", "ptr 0x7F3A2B9C00 bad"], id="hex"),
        pytest.param(["peer 10.0.0.1 down", "peer 10.0.0.1,10.0.0.2 down"], id="ip-list"),
    ],
)
def test_value_variants_of_one_event_mask_alike(masker: Masker, variants: list[str]) -> None:
    assert len({masker.mask(v) for v in variants}) == 1, [masker.mask(v) for v in variants]


@pytest.mark.parametrize(
    "variants",
    [
        pytest.param(["peer 10.0.0.1 down", "peer 10.0.0.1:29500 down"], id="ipv4-vs-ipv4:port"),
        pytest.param(
            ["10.0.0.1 connected to store", "10.0.0.1:29500 connected to store"],
            id="address-at-the-head",
        ),
        pytest.param(
            ["released id 3f2a9bc1d4e5 now", "released id 12345678 now"], id="hex-vs-decimal-id"
        ),
        pytest.param(
            ["lifetime <1 sec then closed", "lifetime 00:02 then closed"], id="duration-vs-clock"
        ),
        pytest.param(
            ["got 12x speed-up on node", "got 3x speed-up on node"], id="digits-in-a-word"
        ),
        pytest.param(["freed 4G of host cache", "freed 12.3 GiB of host cache"], id="4G-vs-GiB"),
    ],
)
def test_value_variants_of_one_event_share_a_template(variants: list[str]) -> None:
    # The masks give these different placeholders (<IP> / <ADDR>, <HEX> / <NUM>...) or leave
    # digits in a word; Drain treats every placeholder and every token with a digit as a variable.
    from l4_plugin.ingest.parser import LineParser

    parser = LineParser()
    kinds = parser.feed(variants)
    parser.finish()
    assert len({k.template for k in kinds}) == 1, [k.body for k in kinds]


def test_masked_values_are_not_evidence_of_one_event() -> None:
    # Two short lines that share only their masked values are two events (LogHub OpenStack).
    from l4_plugin.ingest.parser import LineParser

    parser = LineParser()
    kinds = parser.feed(
        [
            "[instance: 0e8a3cbd-6a47-4b62-9c6e-0aa8a0b67a2c] Claim successful",
            "[instance: 0e8a3cbd-6a47-4b62-9c6e-0aa8a0b67a2c] Creating image",
        ]
    )
    parser.finish()
    assert kinds[0].template != kinds[1].template


def _unfiltered(masker: Masker, text: str) -> str:
    """``mask`` with every rule run (no prefilter): what ``mask`` must equal."""
    text = masker.key(text)
    for pattern, _, replace, _ in masker._compiled:
        text = pattern.sub(replace, text)
    return text


def test_required_texts_of_shipped_rules(masker: Masker) -> None:
    needs = {rule.name: c[3] for rule, c in zip(masker.rules, masker._compiled, strict=True)}
    assert needs["url"] == (("://",),)
    assert needs["us-datetime"] == (("00/00/0000",),)
    assert needs["dmesg-time"][0] == ("0.000000]",)
    assert needs["path"] == (("/", ":\\"),)  # one of the two alternatives' texts
    assert needs["hex-id"] == ()  # nothing certain: always run


def test_required_texts_edge_cases() -> None:
    from l4_plugin.ingest.masking import required_texts

    assert required_texts(re.compile("(?i)abc")) == ()
    assert required_texts(re.compile(r"a\d{2}b"), "0") == (("a00b",),)
    assert required_texts(re.compile(r"a\d{2}b")) == (("a",), ("b",))  # 100 alternatives: cut
    assert required_texts(re.compile(r"x(?:ab|cd)?y")) == (("x",), ("y",))
    assert required_texts(re.compile(r"(?<=[A-Za-z_])\d{2,}\b"), "0") == (("00",), ("0",))
    assert required_texts(re.compile(r"a5|b"), "0") == (("b",),)  # "a5" never matches
    assert required_texts(re.compile(r"a5"), "0") == ((),)


def test_prefilter_gives_the_rules_result(masker: Masker) -> None:
    """Skipping a rule whose needed text is absent, and reading an ASCII text with the rules'
    ASCII twins (``ascii_twin``), change nothing: random lines built from the characters and
    words the rules look for (ASCII and not, the separators \\x1c-\\x1f that Unicode counts as
    spaces included), one or two lines at a time."""
    rng = random.Random(16)
    pieces = [*"0123456789abcdefABCDEF:-./[] _,<>=xX\\~@+%\t\x0b\x1c\x1f", "://", "<TS>", "rank"]
    pieces += ["RANK", "Kelvin", "K", "ſ"]
    pieces += ["default", "May", " 10:11:12", "0x1f", "2024-05-03", "MB", "ms", "s", "B"]
    pieces += ["localhost", "é", "٣", "bytes", "E1023", "node-a07", ".py", "µs", "Rank 3"]
    for _ in range(20_000):
        text = "".join(rng.choice(pieces) for _ in range(rng.randint(1, 30)))
        if rng.random() < 0.3:
            text += "\n" + "".join(rng.choice(pieces) for _ in range(rng.randint(1, 20)))
        assert masker.mask(text) == _unfiltered(masker, text), text


def test_ascii_twins_only_where_they_read_ascii_text_alike(masker: Masker) -> None:
    from l4_plugin.ingest.masking import ascii_twin

    # every shipped rule has one (none uses \\s): its \\d, \\w and \\b are table lookups
    assert all(twin.flags & re.ASCII for _, twin, _, _ in masker._compiled)
    for pattern in (r"a\sb", r"[\S-]+", r"(?:x|\s)", "(?i)ſ\\w", r"x(?i:ſ)", r"(?u)\w+"):
        assert ascii_twin(re.compile(pattern)) is not None
        assert not ascii_twin(re.compile(pattern)).flags & re.ASCII, pattern
    assert re.compile(r"a\sb").search("a\x1cb") and not re.compile(r"a\sb", re.ASCII).search(
        "a\x1cb"
    )  # why \\s keeps its Unicode reading
    twin = ascii_twin(re.compile(r"(?i)\bk\w+\d"))
    assert twin.flags & re.ASCII and twin.flags & re.IGNORECASE
    text = "KELVIN9 x_k_9 k_9 kelvin"
    assert twin.findall(text) == re.compile(r"(?i)\bk\w+\d").findall(text) == ["KELVIN9", "k_9"]
    assert ascii_twin(re.compile(r"\d+ ?µs\b")).flags & re.ASCII  # µ matches no ASCII text
    assert re.compile("(?i)ſ").match("s") and not re.compile("(?i)ſ", re.ASCII).match("s")


def test_prefilter_digits_a_replacement_writes() -> None:
    # A replacement that writes "7": later rules may see a 7 although digits are normalised.
    rules = [MaskRule("seven", "x", "7"), MaskRule("sevens", r"\d7", "<S>")]
    masker = Masker(rules)
    assert masker.mask("x1x") == _unfiltered(masker, "x1x") == "7<S>"
    assert masker.mask("ax") == _unfiltered(masker, "ax") == "a7"


def test_hex_folding_changes_no_shipped_mask(masker: Masker) -> None:
    """``normalise_hex`` (on in the shipped rules) only lets the parser mask fewer keys: random
    lines full of hex literals in every position the rules look at (inside paths, URLs, host
    names, host:port, NCCL prefixes, next to sizes and units) mask as they do without it."""
    plain = Masker(masker.rules, masker.normalise_digits, normalise_hex=False)
    assert masker.normalise_hex and not plain.normalise_hex
    rng = random.Random(17)
    pieces = [*"0123456789abcdefABCDEFxX:-./[]_ ,<>=\\@+%\t", "0x", "0X", "0x7f3a2b", "0xDEAD"]
    pieces += ["0xdeadbeef", "0x1f", "://", "node-", ":29500", " [3] ", ":1234:5678", "MB", "ms"]
    pieces += [" B", "e+", ".py", ".c", ".cc", "localhost", "rank ", "[rank", "default", "é"]
    pieces += ["2024-05-03", " 10:11:12", "E1023", "/data/", "May  3", "g", "_"]
    for _ in range(20_000):
        text = "".join(rng.choice(pieces) for _ in range(rng.randint(1, 24)))
        assert masker.mask(text) == plain.mask(text), text
    assert masker.fold("comm 0x7f3a2b rank 0 commId 0xDEADbeef0 x0x1") == (
        "comm 0x0 rank 0 commId 0x0 x0x1"
    )


def test_hex_switch_is_read_and_checked(tmp_path: Path) -> None:
    path = tmp_path / "masking.yaml"
    rule = "rules:\n  - name: hex\n    pattern: '0x[0-9a-f]+'\n    replace: '<H>'\n"
    path.write_text(rule)
    assert not Masker.load(path).normalise_hex
    path.write_text("normalise_hex: true\n" + rule)
    folding = Masker.load(path)
    assert folding.normalise_hex
    assert folding.fold("p 0xab12") == "p 0x0" and folding.mask("p 0xab12") == "p <H>"
    path.write_text("normalise_hex: yes please\n" + rule)
    with pytest.raises(ConfigError, match=r"'normalise_hex' must be true or false.*yaml:1"):
        Masker.load(path)


def test_an_elapsed_time_past_the_hour_is_the_token_it_was_before(masker: Masker) -> None:
    # tqdm's bar crosses the hour ("[58:24<…" then "[1:02:04<…"), Python's timedelta prints
    # one-digit hours: one template either side of the hour.
    before = masker.mask(" 62%|██████    | 159/254 [58:24<34:53, 22.04s/it]")
    after = masker.mask(" 64%|██████    | 164/254 [1:02:04<34:03, 22.71s/it]")
    assert before == after
    assert masker.mask("Time elapsed 0:05:23.123456") == "Time elapsed <TS>"
