"""Auto-scheduler candidates build, byte for byte, the device IR they built before the
schedule and lowering stages were made faster.

Each case under ``tests/data/lowering_candidates`` is a search state of one of ResNet-18's
sm_90a sketches (CUDA-core split-K and cross-thread reductions, mma.sync and wgmma
convolutions and dense layers; ``states.json``, as records store states) and the device IR
a builder made of it: the schedule made from the state, applied and lowered. A change meant
only to make builds cheaper must keep every one; the whole corpus (70 candidates, to PTX and
cubins) is checked with ``bench/candidate_corpus.py --save`` / ``--check``, and a change
meant to change kernels regenerates these with ``python3 bench/candidate_corpus.py --only
NAMES --fixtures tests/data/lowering_candidates``.
"""

from __future__ import annotations

import functools
import json
import os

import pytest

DATA = os.path.join(os.path.dirname(__file__), "data", "lowering_candidates")
with open(os.path.join(DATA, "states.json")) as _f:
    STATES = {it["name"]: it for it in json.load(_f)}


def _file(name: str) -> str:
    return os.path.join(DATA, name.replace("/", "__").replace(":", "_") + ".device.ir")


@functools.cache
def _tasks(net: str) -> list:
    from ptxforge import autosched
    from ptxforge.graph.zoo import get_network

    graph, params, _, _ = get_network(net, 1, "NHWC", "float32")
    return autosched.extract_tasks(graph, params, "cuda -arch=sm_90a", precision="float16")[0]


def _build(entry: dict):
    from ptxforge.autosched.state import candidate_input, state_from_payload
    from ptxforge.measure.build import BuildOptions, build_candidate

    net, idx = entry["task"].rsplit(":", 1)
    task = _tasks(net)[int(idx)]
    state = state_from_payload(task, entry["payload"])
    assert state is not None, f"{entry['name']}: the task no longer has this sketch"
    return build_candidate(candidate_input(task, state),
                           BuildOptions(target_sm="sm_90a", compile_to="ir"))


def _first_difference(want: str, got: str) -> str:
    for i, (a, b) in enumerate(zip(want.splitlines(), got.splitlines())):
        if a != b:
            return f"line {i + 1}:\n  expected: {a}\n  got:      {b}"
    return f"{len(want.splitlines())} lines expected, {len(got.splitlines())} got"


@pytest.mark.parametrize("name", sorted(STATES))
def test_candidate_builds_the_recorded_device_ir(name):
    res = _build(STATES[name])
    assert res.error_no == 0, f"{name}: {res.error_msg}"
    with open(_file(name)) as f:
        want = f.read()
    got = res.artifact.device_ir
    assert got == want, f"{name}: the device IR changed at {_first_difference(want, got)}"


def test_the_candidates_cover_the_schedule_kinds():
    # the identity must hold for CUDA-core and both tensor-core paths, convs and GEMMs
    kinds = {name.split("/")[1] for name in STATES}
    assert {"split_k", "cross_thread", "tensorcore_conv", "tensorcore_gemm", "wgmma_conv",
            "wgmma_gemm"} <= kinds
