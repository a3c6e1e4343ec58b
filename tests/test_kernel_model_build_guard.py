"""The kernel model refuses states whose unrolled code takes seconds to build.

``tests/data/build_guard_records.jsonl`` is an extract of fp16 tuning runs of MobileNetV2
and BERT on an H200 (1,000 trials each, sm_90a sketches): every CUDA-core tile state that
built in over a second (``all_cost``, build and run seconds; 10 s is the builders' timeout)
and, per task, the two tile states within 5% of the task's best (``near_best``) whose code
was largest. The rule must keep every one of the latter and refuse most of the former.
"""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

from ptxforge import autosched
from ptxforge.autosched.kernel_model import MAX_UNROLLED_PER_THREAD
from ptxforge.autosched.state import state_from_payload
from ptxforge.graph.zoo import get_network

DATA = os.path.join(os.path.dirname(__file__), "data", "build_guard_records.jsonl")
TARGET = "cuda -arch=sm_90a"


@pytest.fixture(scope="module")
def tasks() -> dict:
    """``{workload key: SearchTask}`` of the two networks, as ``tune-network`` extracts
    them (batch 1, NHWC, fp16)."""
    out = {}
    for name in ("mobilenet_v2", "bert"):
        net, params, _, _ = get_network(name, 1, "NHWC", "float32")
        for t in autosched.extract_tasks(net, params, TARGET, precision="float16")[0]:
            out[t.workload_key] = t
    return out


@pytest.fixture(scope="module")
def judged(tasks) -> list:
    """``(record, valid, unrolled code)`` of every record of the extract."""
    out = []
    with open(DATA) as f:
        for line in f:
            rec = json.loads(line)
            task = tasks[rec["task"]]
            st = state_from_payload(task, {"kind": "autosched", "sketch": rec["sketch"],
                                           "state": rec["state"]})
            assert st is not None, f"{rec['sketch']} no longer reads its record"
            model = task.models[st.sketch]
            rows = np.array([st.values], dtype=np.int64)
            kernels = model.kernels(rows)
            code = max(int(k["unrolled_code"][0]) for _, k in kernels if "unrolled_code" in k)
            out.append((rec, bool(model.valid(rows, kernels)[0]), code))
    return out


def test_no_near_best_state_refused(judged):
    kept = [(rec, code) for rec, valid, code in judged if rec["near_best"]]
    assert len(kept) >= 15
    refused = [(rec["sketch"], rec["state"], code) for rec, valid, code in judged
               if rec["near_best"] and not valid]
    assert refused == []
    # a margin: the largest near-best code is well under the cap
    assert max(code for _, code in kept) * 1.35 <= MAX_UNROLLED_PER_THREAD


def test_slow_builds_refused(judged):
    slow2 = [(rec, valid) for rec, valid, _ in judged if rec["all_cost"] > 2.0]
    slow1 = [(rec, valid) for rec, valid, _ in judged if rec["all_cost"] > 1.0]
    assert len(slow2) >= 8
    # every build over 2 s (the two timeouts of MobileNetV2 included) is refused
    assert [rec["all_cost"] for rec, valid in slow2 if valid] == []
    assert sum(not valid for _, valid in slow1) >= 0.8 * len(slow1)


def test_unrolled_code_of_a_timed_out_state(tasks):
    # MobileNetV2's depthwise 3x3 of 32 channels at 14x14 (stride 1): 2 threads a block,
    # each with 2 vthreads of 14 x 3 outputs unrolled over the 9 taps (378 statements
    # each) and 136 iterations of cooperative fetch: it hit the 10 s timeout
    rec = {"sketch": "tile(DepthwiseConv2d)", "state": {
        "DepthwiseConv2d.tile.b": [1, 1, 1, 1, 1], "DepthwiseConv2d.tile.i": [1, 1, 1, 2, 7],
        "DepthwiseConv2d.tile.j": [7, 2, 1, 1, 1], "DepthwiseConv2d.tile.c": [32, 1, 2, 1, 3],
        "DepthwiseConv2d.tile.di": [1, 1, 3], "DepthwiseConv2d.tile.dj": [1, 1, 3],
        "DepthwiseConv2d.unroll": 1024, "DepthwiseConv2d.vec.PaddedInput": 4,
        "DepthwiseConv2d.vec.kernel_view": 1}}
    task = next(t for t in tasks.values() if t.desc == "vm_mod_fused_nn_conv2d_add_clip_9")
    st = state_from_payload(task, {"kind": "autosched", **rec})
    model = task.models[st.sketch]
    rows = np.array([st.values], dtype=np.int64)
    (kind, k), = model.kernels(rows)
    assert kind == "tile"
    assert int(k["fetch_iters"][0]) == 136
    assert int(k["unrolled_code"][0]) == 2 * 378 + 136
    assert not model.valid(rows)[0]
    # the same tiles without unrolling: loops stay loops, the state is valid
    rec["state"]["DepthwiseConv2d.unroll"] = 0
    st0 = state_from_payload(task, {"kind": "autosched", **rec})
    rows0 = np.array([st0.values], dtype=np.int64)
    assert int(model.kernels(rows0)[0][1]["unrolled_code"][0]) == 2 * 1 + 136
    assert model.valid(rows0)[0]


def test_search_proposes_no_refused_state(tasks):
    task = next(t for t in tasks.values() if t.desc == "vm_mod_fused_nn_conv2d_add_clip_9")
    policy = autosched.SketchPolicy(task, autosched.RandomModel(seed=0), seed=0, verbose=0)
    pop = policy.sample_initial_population(256)
    tile = [k for k, sk in enumerate(task.sketches) if sk.name.startswith("tile(")]
    rows = pop[np.isin(pop[:, 0], tile)]
    assert len(rows) > 0
    for k in tile:
        mine = rows[rows[:, 0] == k][:, 1: 1 + len(task.sketches[k].slots)]
        if len(mine):
            code = task.models[k].kernels(mine)[0][1]["unrolled_code"]
            assert int(code.max()) <= MAX_UNROLLED_PER_THREAD
