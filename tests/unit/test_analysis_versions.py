"""A node that runs other versions than the rest of the job (``analysis.versions``)."""

from __future__ import annotations

from l4_plugin.analysis.versions import odd_versions


def _banner(node: str, nccl: str, driver: str = "550.90.07") -> tuple[str, str, str]:
    line = (
        f"[entrypoint] 2025-08-06T01:01:07+09:00 host={node} torch=2.5.1+cu124 nccl={nccl} "
        f"driver={driver} image=nvcr.io/nvidia/pytorch:24.09-py3"
    )
    return node, "banner", line


def test_the_node_on_another_nccl_is_named_with_what_the_others_run() -> None:
    lines = [_banner(f"gpu-{i}", "2.17.1" if i == 5 else "2.21.5") for i in range(8)]
    [odd] = odd_versions(lines)
    assert (odd.node, odd.what, odd.value, odd.common, odd.others) == (
        "gpu-5",
        "nccl",
        "2.17.1",
        "2.21.5",
        7,
    )
    assert odd.why == "nccl 2.17.1 where 7 nodes run 2.21.5"


def test_a_version_an_error_states_counts_too() -> None:
    line = (
        "[rank{r}]: torch.distributed.DistBackendError: NCCL error in: NCCLUtils.hpp:317, "
        "internal error - please report this issue to the NCCL developers, NCCL version {v}"
    )
    lines = [
        (f"n{r}", "err", line.format(r=r, v="2.17.1" if r == 2 else "2.21.5")) for r in range(6)
    ]
    assert [(o.node, o.what, o.value) for o in odd_versions(lines)] == [("n2", "nccl", "2.17.1")]


def test_no_common_version_or_too_few_nodes_name_nobody() -> None:
    # half and half: which half is odd is not for the versions to say
    split = [_banner(f"gpu-{i}", "2.17.1" if i < 4 else "2.21.5") for i in range(8)]
    # two nodes: nothing to compare one with
    pair = [_banner("a", "2.17.1"), _banner("b", "2.21.5")]
    # every node alike
    alike = [_banner(f"gpu-{i}", "2.21.5") for i in range(8)]
    assert odd_versions(split) == () and odd_versions(pair) == () and odd_versions(alike) == ()
