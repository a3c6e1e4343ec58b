"""The default picks of ViT-B/16's products (197 tokens, fp16, with their own epilogues):
the few-row rule's 64 x 64 tiles run 5 stages from 3 row blocks (``row_blocks.py``, an H200's
tuning records); 128 rows keep 4 at 12 steps. Each pick builds to sm_90a PTX through the
default schedule, and small instances of its configurations match numpy on the simulator."""

from __future__ import annotations

import numpy as np
import pytest

from ptxforge import te
from ptxforge.ir.te import ComputeOp
from ptxforge.ops.schedules.gemm import chooser
from ptxforge.ops.schedules.gemm.chooser import few_row_wgmma_config, wgmma_choice
from ptxforge.ops.schedules.gemm.forms import gemm_form
from ptxforge.ops.schedules.gemm.knobs import WgmmaScheduleConfig
from ptxforge.ops.schedules.gemm.row_blocks import deep_by_rows

from .test_wgmma_gemm import _dense, _ref, _run, _schedule

SM90A = "cuda -arch=sm_90a"

# ViT-B/16's four products with the epilogues its graph fuses into them: (M, N, K, bias,
# act, residual); the H200 records' us a call of 4 -> 5 stages in the comments
VIT = {
    "qkv": (197, 2304, 768, True, None, False),      # 6.21 -> 5.47 (best 5.24, 64 x 128)
    "proj": (197, 768, 768, True, None, True),       # 4.18 -> 3.69, the best
    "ffn1": (197, 3072, 768, True, "gelu", False),   # 7.02 -> 6.02, the best
    "ffn2": (197, 768, 3072, True, None, True),      # 4 parts: 8.08 -> 7.20 (best 6.97)
}
VIT_PICKS = {
    "qkv": WgmmaScheduleConfig(64, 1, 5, 1, 1),
    "proj": WgmmaScheduleConfig(64, 1, 5, 1, 1),
    "ffn1": WgmmaScheduleConfig(64, 1, 5, 1, 1),
    "ffn2": WgmmaScheduleConfig(64, 1, 5, 1, 4),
}


def _graph_product(M, N, K, bias, act, residual):
    """The product stage, its epilogue and form of the fused function as the graph builds
    it (float32 accumulation, the epilogue, then the cast to fp16)."""
    y, args = _dense(M, N, K, bias=bias, act=act, residual=residual, cast="float16")
    s = te.create_schedule(y.op)
    prod = next(op for op in s.dag.ops if isinstance(op, ComputeOp) and op.reduce_axis)
    return y, args, prod, (None if y.op is prod else y.op), gemm_form(prod, SM90A)


@pytest.mark.parametrize("name", sorted(VIT))
def test_vit_products_take_five_stages(name):
    _, _, prod, epi, form = _graph_product(*VIT[name])
    assert deep_by_rows(form)
    assert few_row_wgmma_config(form, SM90A) == VIT_PICKS[name]
    assert wgmma_choice(prod, epi, form, SM90A) == VIT_PICKS[name]


@pytest.mark.parametrize("name", sorted(VIT))
def test_bert_at_128_tokens_keeps_four_stages_at_12_steps(name):
    # BERT-base b1 x 128 tokens on the same H200: 4 stages 1.03x-1.06x faster than 5
    M, N, K, *epi = VIT[name]
    _, _, prod, ep, form = _graph_product(128, N, K, *epi)
    assert not deep_by_rows(form)
    want = {"ffn2": WgmmaScheduleConfig(64, 1, 4, 1, 4)}.get(
        name, WgmmaScheduleConfig(64, 1, 4, 1, 1))
    assert wgmma_choice(prod, ep, form, SM90A) == want


@pytest.mark.parametrize("M,stages", [(128, 4), (129, 5), (197, 5), (256, 5)])
def test_the_depth_turns_at_three_row_blocks(M, stages):
    form = _graph_product(M, 768, 768, True, None, True)[4]
    assert few_row_wgmma_config(form, SM90A).stages == stages


def test_beyond_the_few_row_range_the_rule_is_silent():
    # 257 rows: the mid-size rule or the estimates choose, as before
    form = _graph_product(257, 768, 768, True, None, True)[4]
    assert deep_by_rows(form) and few_row_wgmma_config(form, SM90A) is None
    # longer parts took 5 stages already (16 steps): unchanged
    form = _graph_product(100, 3072, 1024, True, None, False)[4]
    assert not deep_by_rows(form) and few_row_wgmma_config(form, SM90A).stages == 5


@pytest.mark.parametrize("name", sorted(VIT))
def test_the_default_schedules_of_vit_products_compile_to_ptx(name, monkeypatch):
    import ptxforge
    from ptxforge.backend_ptx import compile_module
    from ptxforge.ops.schedules import default_schedule
    from ptxforge.ops.schedules.gemm import schedule as gemm_schedule
    from ptxforge.target import as_target

    taken = []

    def spy(*args, **kwargs):
        taken.append(wgmma_choice(*args, **kwargs))
        return taken[-1]

    monkeypatch.setattr(gemm_schedule, "wgmma_choice", spy)
    y, args, *_ = _graph_product(*VIT[name])
    target = as_target(SM90A)
    with target:
        ptx = compile_module(ptxforge.lower(default_schedule(y, target), args + [y]),
                             target).get_source("ptx")
    assert taken == [VIT_PICKS[name]]
    assert "wgmma.mma_async" in ptx and "cp.async" in ptx
    assert "ld.local" not in ptx and "st.local" not in ptx


@pytest.mark.parametrize("M,N,K,act,residual,cfg", [
    # 4 row blocks (the last of 5 rows), 6 steps through 5 stages, residual epilogue
    (197, 128, 384, None, True, (64, 1, 5, 1, 1)),
    # 4 parts of 320 columns (5 steps each, 5 stages), the GELU in the second kernel
    (197, 64, 1280, "gelu", False, (64, 1, 5, 1, 4)),
])
def test_the_picks_configurations_compute_the_product(M, N, K, act, residual, cfg):
    y, args = _dense(M, N, K, bias=True, act=act, residual=residual, cast="float16")
    s, _ = _schedule(y, WgmmaScheduleConfig(*cfg))
    _, vals, got = _run(s, args, y)
    want = _ref(vals, True, act, residual)
    np.testing.assert_allclose(got, want, rtol=2e-2, atol=2e-2 * np.abs(want).max())


def test_the_rule_pick_still_gives_way_to_a_broken_rule(monkeypatch):
    form = _graph_product(*VIT["proj"])[4]
    monkeypatch.setattr(chooser, "first_broken", lambda rules: "a broken rule")
    assert few_row_wgmma_config(form, SM90A) is None
