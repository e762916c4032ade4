from __future__ import annotations

import json

from l4_plugin.ingest.masking import Masker
from l4_plugin.ingest.parser import LineParser
from l4_plugin.ingest.templates import (
    TemplateMiner,
    template_from_dict,
    template_id,
    template_to_dict,
)

LINES = [
    "node-a07:1234:5678 [3] NCCL INFO Channel 00/24 : 0 1 2 3",
    "node-a07:1234:5678 [3] NCCL INFO Channel 01/24 : 0 1 2 3",
    "[2024-05-03 10:11:12,345] [INFO] [logging.py:96:log_dist] [Rank 0] step=100, skipped=0",
    "[2024-05-03 10:11:13,345] [INFO] [logging.py:96:log_dist] [Rank 0] step=101, skipped=0",
    "Connection to peer alpha closed by remote",
    "Connection to peer beta closed by remote",
    "Connection to peer gamma closed by remote",
    "W0503 10:11:12.123000 140 torch/x/api.py:858] Sending process 12 closing signal SIGTERM",
]


def test_identical_masked_lines_share_a_kind() -> None:
    parser = LineParser()
    kinds = parser.feed(LINES[:4] + LINES[:2])
    assert kinds[0] is kinds[1] is kinds[4] is kinds[5]
    assert kinds[2] is kinds[3]
    assert kinds[0] is not kinds[2]
    again = parser.feed([LINES[1]])
    assert again[0] is kinds[0]


def test_ids_are_hash_of_final_text() -> None:
    parser = LineParser()
    kinds = parser.feed(LINES)
    parser.finish()
    peer = kinds[4].template
    assert peer is not None
    assert peer.text == "Connection to peer <*> closed by remote"
    assert peer.id == template_id(peer.text)
    assert kinds[5].template == peer


def test_stable_ids_across_jobs_with_known_templates() -> None:
    first = LineParser()
    kinds1 = first.feed(LINES)
    first.finish()
    stored = json.loads(json.dumps([template_to_dict(t) for t in first.new_templates()]))
    known = [template_from_dict(d) for d in stored]
    # The second job sees the lines in another order: without known templates Drain could build
    # different clusters; with them every line keeps its id.
    second = LineParser(known=known)
    kinds2 = second.feed(list(reversed(LINES)))
    second.finish()
    ids1 = [k.template.id for k in kinds1 if k.template]
    ids2 = [k.template.id for k in reversed(kinds2) if k.template]
    assert ids1 == ids2
    assert second.new_templates() == []


def test_new_job_line_matches_known_template() -> None:
    first = LineParser()
    first.feed(LINES)
    first.finish()
    second = LineParser(known=first.new_templates())
    (kind,) = second.feed(["Connection to peer delta closed by remote"])
    (new_kind,) = second.feed(["Connection to peer delta was reset"])
    second.finish()
    assert kind.template is not None
    assert kind.template.text == "Connection to peer <*> closed by remote"
    assert new_kind.template is not None
    assert new_kind.template in second.new_templates()


def test_most_specific_known_template_wins() -> None:
    general = template_from_dict({"id": "g", "text": "a <*> <*>"})
    specific = template_from_dict({"id": "s", "text": "a b <*>"})
    for order in ([general, specific], [specific, general]):
        miner = TemplateMiner(known=order)
        handle = miner.add("a b c")
        miner.finish()
        assert miner.template_for(handle).id == "s"


def test_template_evolves_until_finish() -> None:
    # The varying word comes after the first three tokens, which Drain's tree routes on (depth 6).
    miner = TemplateMiner()
    h1 = miner.add("job started on host x fine")
    miner.finish()
    assert miner.template_for(h1).text == "job started on host x fine"
    h2 = miner.add("job started on host y fine")
    miner.finish()
    assert miner.template_for(h1) == miner.template_for(h2)
    assert miner.template_for(h1).text == "job started on host <*> fine"


def test_lines_differing_in_the_second_token_stay_apart() -> None:
    # depth >= 5: Drain's prefix tree routes on the second token too (LogHub OpenStack GET/POST).
    get = '<IP> "GET <PATH> HTTP/<NUM>" status: <NUM> len: <NUM> time: <NUM>'
    post = '<IP> "POST <PATH> HTTP/<NUM>" status: <NUM> len: <NUM> time: <NUM>'
    miner = TemplateMiner()
    a, b = miner.add(get), miner.add(post)
    assert miner.template_for(a) != miner.template_for(b)
    shallow = TemplateMiner(depth=4)  # drain3's default merges them: one token in ten differs
    a, b = shallow.add(get), shallow.add(post)
    assert shallow.template_for(a) == shallow.template_for(b)


def test_masker_is_pluggable() -> None:
    parser = LineParser(masker=Masker([], normalise_digits=False))
    a, b = parser.feed(["x 1", "x 2"])
    assert a is not b
