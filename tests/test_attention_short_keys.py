"""The default attention configuration of narrow heads over 128 to 256 keys in one wave
(ViT-B/16's 197 tokens, BERT-base at 128; ``short_keys.py``, an H200's tuning records):
128-key tiles, 2 stages, the overlapped register form. The pick, where the rule is silent,
the kernel of ViT's own workload (a combined Q/K/V projection read through views) on the
simulator against numpy, and its PTX for sm_90a."""

from __future__ import annotations

import numpy as np
import pytest

from ptxforge import backend_sim
from ptxforge.graph.opdefs.elemwise import cast_array
from ptxforge.ops.attention_testing import attention_python, attention_tolerance
from ptxforge.ops.schedules.attention import (
    AttentionMask,
    AttentionWorkload,
    attention_module,
    check_attention_config,
    choose_attention_config,
)
from ptxforge.ops.schedules.attention.knobs import NARROW_PICK
from ptxforge.ops.schedules.attention.short_keys import SHORT_PICK, short_keys_pick
from ptxforge.ops.testing import widen
from ptxforge.target import as_target

from .test_fold_attention_layout_views import _combined

SM90A = as_target("cuda -arch=sm_90a")


def _vit(tokens=197, heads=12, batch=1, dim=64, **kw) -> AttentionWorkload:
    return AttentionWorkload(batch, heads, heads, tokens, tokens, dim, dim, "float16",
                             layout="bshd", **kw)


@pytest.mark.parametrize("tokens", [
    197,  # ViT-B/16: 3.53 us, the best of 63 records; the estimate's pick 4.50
    128,  # BERT-base b1: 2.95, the best (tied); the estimate's pick 3.26
    256,  # two 128-key tiles, as at 197
])
def test_narrow_heads_over_short_keys_take_the_overlapped_128_key_tiles(tokens):
    w = _vit(tokens)
    assert SHORT_PICK == choose_attention_config(w, SM90A)
    assert (SHORT_PICK.warps, SHORT_PICK.block_kv, SHORT_PICK.stages, SHORT_PICK.overlap) == (
        4, 128, 2, "intra")
    check_attention_config(w, SHORT_PICK, SM90A)


def test_the_pick_reads_vits_combined_projection():
    # the graph folds the head split into views of the [197, 2304] projection
    _, views, _ = _combined(1, 197, 12, 12, 64, "float16")
    assert choose_attention_config(_vit(views=views), SM90A) == SHORT_PICK


@pytest.mark.parametrize("w,target", [
    (_vit(127), SM90A),                            # fewer keys: not measured
    (_vit(257), SM90A),                            # three tiles: not measured
    (AttentionWorkload(1, 12, 12, 1, 197, 64, 64), SM90A),  # one query (decoding)
    (_vit(197, dim=128), SM90A),                   # a wider head
    (_vit(197, causal=True), SM90A),               # causal
    (_vit(197, mask=AttentionMask((1, 1, 1, 197), "bool")), SM90A),  # a padding mask
    (_vit(197, batch=8), SM90A),                   # 384 blocks: more than one wave
    (_vit(197), as_target("cuda -arch=sm_80")),    # no wgmma
    (AttentionWorkload(1, 12, 12, 197, 197, 64, 64, "bfloat16"), SM90A),  # bf16
])
def test_outside_the_measured_range_the_rule_is_silent(w, target):
    assert short_keys_pick(w, target) is None
    assert choose_attention_config(w, target).overlap == "none"


def test_the_narrow_head_rule_keeps_512_to_1024_keys():
    assert choose_attention_config(_vit(512), SM90A) == NARROW_PICK


def test_the_pick_runs_vits_attention_on_the_simulator():
    # ViT's tokens and head dim through views of one combined projection, 2 of its heads
    b, lq, h, e = 1, 197, 2, 64
    base, views, (q, k, v) = _combined(b, lq, h, h, e, "float16")
    w = _vit(lq, heads=h, views=views, scale=0.125)
    assert choose_attention_config(w, SM90A) == SHORT_PICK
    out = cast_array(np.full((b, lq, h, e), np.nan), "float16")
    backend_sim.run(attention_module(w, SHORT_PICK), [base, base, base, out])
    want = attention_python(q, k, v, None, 0.125, False, dtype="float16", layout="bshd")
    got = widen(out, "float16")
    assert np.isfinite(got).all()
    assert np.abs(got - want).max() <= attention_tolerance("float16") * max(
        1, np.abs(want).max())


def test_the_pick_compiles_vits_attention_to_ptx():
    from ptxforge.backend_ptx import compile_module

    _, views, _ = _combined(1, 197, 12, 12, 64, "float16")
    w = _vit(views=views)
    ptx = compile_module(attention_module(w, choose_attention_config(w, SM90A)),
                         SM90A).get_source("ptx")
    assert "wgmma.mma_async" in ptx and "cp.async" in ptx and ".local" not in ptx


def test_the_tuners_default_is_the_pick():
    # AutoTVM's default config names every knob: the rule's pick is a point of its space
    from .test_attention_autotvm_registers import _step, _task

    args = (1, 2, 2, 197, 197, 64, 64, "float16", False)
    task = _task(args)
    with SM90A:
        default = task.default_config()
    assert default is not None and _step(task, default).config == SHORT_PICK
