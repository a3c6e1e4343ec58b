"""Tensor-core instruction kinds as data, intrinsics by structured key, and the one choice
of wgmma or mma.sync."""

from __future__ import annotations

import pytest

from ptxforge.ir.intrin import IntrinError, IntrinKey, get_intrin, intrin_name, list_intrins, lookup
from ptxforge.ir.intrin.kinds import KINDS, MMA_SYNC, MMA_SYNC_TF32, WGMMA, mma_kind
from ptxforge.ops.schedules.gemm.choice import prefer_wgmma, wgmma_dtype_refusal, wgmma_refusal
from ptxforge.ops.schedules.gemm.forms import GemmForm


def test_every_intrinsic_has_a_key_that_finds_it():
    names = list_intrins()
    assert len(names) > 60
    for name in names:
        it = get_intrin(name)
        assert it.key is not None, name
        assert intrin_name(it.key) == name
        assert lookup(it.key) is it
        assert it.key.op == it.kind


def test_keys_are_unique():
    keys = [get_intrin(n).key for n in list_intrins()]
    assert len(set(keys)) == len(keys)


def test_lookup_names_the_missing_key_and_the_known_ones():
    with pytest.raises(IntrinError, match=r"no tensor intrinsic registered for .*"
                                          r"ab='float64'.*mma intrinsics are"):
        lookup(IntrinKey("mma", ab="float64", acc="float32"))


@pytest.mark.parametrize("kind,args,name", [
    (MMA_SYNC, ("float16", "float32", False), "mma_m16n8k16_f16_f32"),
    (MMA_SYNC, ("bfloat16", "float32", True), "mma_m16n8k16_bf16_f32_kn"),
    (MMA_SYNC, ("float16", "float16", True), "mma_m16n8k16_f16_f16_kn"),
    (MMA_SYNC_TF32, ("float32", "float32", False), "mma_m16n8k8_tf32_f32"),
    (WGMMA, ("float16", "float32", False, 128), "wgmma_m64n128k16_f16_f32"),
    (WGMMA, ("bfloat16", "float32", True, 64), "wgmma_m64n64k16_bf16_f32_kn"),
])
def test_kind_mma_names(kind, args, name):
    assert kind.mma(*args) == name
    assert get_intrin(name).kind == ("wgmma" if kind is WGMMA else "mma")


def test_kind_fill_and_store():
    assert MMA_SYNC.fill("float32") == "fill_m16n8_f32"
    assert MMA_SYNC.fill("float16") == "fill_m16n8_f16"
    assert WGMMA.fill("float32", 256) == "fill_wg_m64n256_f32"
    assert MMA_SYNC.store("float32") == "store_c_f32"
    assert MMA_SYNC.store("float32", "float32") == "store_c_f32"
    assert MMA_SYNC.store("float32", "bfloat16") == "store_c_f32_bf16"
    assert WGMMA.store("float32", "float16") == "store_wg_f32_f16"
    assert get_intrin(WGMMA.store("float32")).shapes["M"] == WGMMA.store_tile
    assert get_intrin(MMA_SYNC.store("float32")).shapes["M"] == MMA_SYNC.store_tile


def test_fragment_plans():
    a = MMA_SYNC.fragment_load("A", "float16")
    assert (a.rows, a.axis, a.intrin) == (16, 0, "ldmatrix_a_x4_f16")
    b = MMA_SYNC.fragment_load("B", "bfloat16", b_kn=True, warp_cols=32)
    assert (b.rows, b.axis, b.intrin) == (16, 1, "ldmatrix_b_x4_trans_bf16")
    b = MMA_SYNC.fragment_load("B", "float16", warp_cols=8)
    assert (b.rows, b.axis, b.intrin) == (8, 0, "ldmatrix_b_x2_f16")
    b = MMA_SYNC.fragment_load("B", "float16", b_kn=True, path="load")
    assert (b.rows, b.axis, b.intrin) == (8, 1, "load_b_f16_kn")
    b = MMA_SYNC_TF32.fragment_load("B", "float32", warp_cols=16)
    assert b.intrin == "ldmatrix_b_x4_tf32"
    assert MMA_SYNC_TF32.fragment_load("A", "float32", path="load").intrin == "load_a_tf32"
    # the plan's tile is the intrinsic's: rows along the axis it runs
    for plan in (a, b):
        it = get_intrin(plan.intrin)
        assert plan.rows == it.shapes["F"][0]


def test_kinds_refuse_what_they_do_not_run():
    with pytest.raises(IntrinError, match="takes B as \\[N, K\\] only"):
        MMA_SYNC_TF32.mma("float32", "float32", b_kn=True)
    with pytest.raises(IntrinError, match="takes float16 or bfloat16 inputs, not float32"):
        MMA_SYNC.mma("float32")
    with pytest.raises(IntrinError, match="accumulates in float32, not float16"):
        WGMMA.mma("float16", "float16", n=128)
    with pytest.raises(IntrinError, match="through descriptors"):
        WGMMA.fragment_load("A", "float16")
    with pytest.raises(IntrinError, match="'ldmatrix' or 'load'"):
        MMA_SYNC.fragment_load("A", "float16", path="lds")
    with pytest.raises(IntrinError, match="m64n100k16|registered for"):
        WGMMA.mma("float16", n=100)


def test_kinds_are_frozen_data():
    assert mma_kind("float32") is MMA_SYNC_TF32
    assert mma_kind("bfloat16") is MMA_SYNC
    assert mma_kind("float16", wgmma=True) is WGMMA
    assert {k.acc_scope for k in KINDS} == {"warp", "warpgroup"}
    assert WGMMA.threads == 128 and MMA_SYNC.threads == 32
    with pytest.raises(AttributeError):
        MMA_SYNC.k = 32


def _form(M=4096, N=4096, K=4096, ab="float16", batch=1, broadcast=False):
    return GemmForm(batch, M, N, K, ab, "float32", False, ab == "float32", broadcast=broadcast)


def test_wgmma_refusal_rules():
    h = "cuda -arch=sm_90a"
    assert wgmma_refusal(_form(), h) is None
    assert "sm_90a" in wgmma_refusal(_form(), "cuda -arch=sm_80")
    assert "TF32" in wgmma_refusal(_form(ab="float32"), h)
    assert "narrower" in wgmma_refusal(_form(N=32), h)
    assert "broadcast" in wgmma_refusal(_form(M=96, batch=4, broadcast=True), h)
    assert "accumulates in float32" in wgmma_dtype_refusal("float16", "float16", h)


def test_prefer_wgmma_ties_go_to_mma_sync():
    from ptxforge.ops.schedules.gemm.chooser import choose_gemm_config, choose_wgmma_config
    from ptxforge.ops.schedules.gemm.estimate import gemm_time, wgmma_time

    h = "cuda -arch=sm_90a"
    big, thin = _form(), _form(M=1)
    for form in (big, thin):
        w = choose_wgmma_config(form, h, False, False)
        m = choose_gemm_config(form, h)
        expect = gemm_time(m, form, h) > wgmma_time(w, form, h, False)
        assert prefer_wgmma(form, w, m, False, h) is expect
        assert prefer_wgmma(form, None, m, False, h) is False
        assert prefer_wgmma(form, w, None, False, h) is True
    # the large product goes to wgmma, the single row (bound by reading B) to mma.sync
    assert prefer_wgmma(big, choose_wgmma_config(big, h, False, False),
                        choose_gemm_config(big, h), False, h)
    assert not prefer_wgmma(thin, choose_wgmma_config(thin, h, False, False),
                            choose_gemm_config(thin, h), False, h)
