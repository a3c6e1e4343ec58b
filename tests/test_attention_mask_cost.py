"""What an additive mask costs the fused attention kernel a score: one ``fma`` (the scale
and the mask's base-2 term together), the mask's element read and scaled once a column
for the rows of a thread where it has no rows (``[.., 1, S]``, a padding mask), adjacent
keys read as one vector inside the keys, and float32 / bfloat16 masks scaled by one
compare, one select and one multiply (:func:`~ptxforge.ops.schedules.attention.builders.
_scaled_mask`). The simulator against numpy for the three forms, with edge tiles and
query rows past the end; the PTX's counts for a BERT-shaped padding mask (sm_90a)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from ptxforge import backend_sim
from ptxforge.graph.opdefs.elemwise import cast_array
from ptxforge.ops.attention_testing import attention_python, attention_tolerance
from ptxforge.ops.schedules.attention import (
    AttentionConfig,
    AttentionMask,
    AttentionWorkload,
    attention_module,
)
from ptxforge.ops.schedules.attention.builders import MASK_FLOOR, MASK_KNEE
from ptxforge.ops.testing import widen
from ptxforge.target import as_target

from .bench_scripts import load_bench

RNG = np.random.default_rng(41)
SM90 = as_target("cuda -arch=sm_90a")
CONFIGS = {
    "mma_sync": AttentionConfig(2, 16, 1),
    "wgmma": AttentionConfig(4, 64, 1, "wgmma"),
    "registers": AttentionConfig(4, 64, 1, "wgmma", "registers"),
}
FMIN = float(np.finfo(np.float32).min)


def _bench():
    return load_bench("bench_attention_ptx")


def _run(w: AttentionWorkload, cfg: AttentionConfig, mask: np.ndarray) -> tuple:
    sh = w.shapes()
    q, k, v = (cast_array(RNG.standard_normal(sh[n]), "float16") for n in "qkv")
    out = cast_array(np.full(sh["out"], np.nan), "float16")
    backend_sim.run(attention_module(w, cfg), [q, k, v, mask, out])
    return widen(out, "float16"), (q, k, v)


@pytest.mark.parametrize("form", list(CONFIGS))
@pytest.mark.parametrize("mdt", ["float32", "float16", "bool"])
def test_a_padding_mask_read_once_a_column_matches_numpy(form, mdt):
    # [B, 1, 1, S]: one element a column for every row; 70 keys end inside a tile (the
    # edge tile clamps its keys) and 20 rows inside the query tile (rows past the end)
    b, lq, s, e = 2, 20, 70, 64
    keep = np.ones((b, 1, 1, s), bool)
    keep[0, ..., 50:] = False
    keep[1, ..., 3::7] = False
    if mdt == "bool":
        mask = keep
    else:
        m = np.where(keep, RNG.uniform(-2, 2, keep.shape), -1e4)  # a bias besides the pad
        mask = cast_array(m, mdt)
    w = AttentionWorkload(b, 2, 2, lq, s, e, e, "float16", False, 0.2,
                          AttentionMask(mask.shape, mdt))
    got, (q, k, v) = _run(w, CONFIGS[form], mask)
    want = attention_python(q, k, v, mask if mdt == "bool" else widen(mask, mdt), 0.2,
                            dtype="float16")
    err = np.abs(got - want).max() / max(1.0, np.abs(want).max())
    assert np.isfinite(got).all() and err <= attention_tolerance("float16"), err


@pytest.mark.parametrize("form", list(CONFIGS))
def test_finfo_min_and_minus_infinity_once_a_column(form):
    # batch 0 pads its last keys with finfo.min, batch 1 is filled with it (the float32
    # softmax averages every key), batch 2 pads with minus infinity, batch 3 has values on
    # both sides of MASK_KNEE (a key below it drops out beside the others)
    b, lq, s, e = 4, 16, 64, 64
    m = np.zeros((b, 1, 1, s), np.float32)
    m[0, ..., 40:] = FMIN
    m[1] = FMIN
    m[2, ..., 10:] = -np.inf
    m[3, ..., ::2] = np.float32(MASK_KNEE) * np.float32(0.999)
    m[3, ..., 1::2] = np.float32(MASK_KNEE) * np.float32(1.001)
    m[3, ..., 5] = 0.0
    w = AttentionWorkload(b, 2, 2, lq, s, e, e, "float16", False, 0.2,
                          AttentionMask(m.shape, "float32"))
    got, (q, k, v) = _run(w, CONFIGS[form], m)
    vd = widen(v, "float16").astype(np.float32)
    want = attention_python(q, k, v, m, 0.2, dtype="float16")
    want[1] = vd[1].mean(axis=1, keepdims=True)  # s + finfo.min rounds to finfo.min
    want[3] = vd[3, :, 5:6]  # the only key above the knee's values
    err = np.abs(got - want).max() / max(1.0, np.abs(want).max())
    assert np.isfinite(got).all() and err <= attention_tolerance("float16"), err


def test_the_knee_keeps_every_scaled_mask_finite_and_below_the_others():
    # the two sides of the knee: m log2 e down to it, m / 2 below, never below the floor
    assert MASK_KNEE * 1.4426950408889634 == pytest.approx(MASK_FLOOR)
    assert FMIN / 2 >= MASK_FLOOR * (1 + 1e-7)
    assert MASK_KNEE / 2 < -1e37  # a key below the knee drops out beside any other


def _bert_like(mdt: str | None) -> tuple:
    w = AttentionWorkload(2, 2, 2, 512, 512, 64, 64, "float16", False)
    if mdt is not None:
        w = dataclasses.replace(w, mask=AttentionMask((2, 1, 1, 512), mdt))
    return w, AttentionConfig(4, 64, 1, "wgmma", "registers", "registers")


def test_a_padding_mask_costs_a_score_one_fma_and_a_column_three_instructions():
    bench = _bench()
    counts = {}
    for mdt in (None, "float32", "float16", "bool"):
        w, cfg = _bert_like(mdt)
        ptx = bench.interior_ptx(w, cfg, SM90)
        counts[mdt] = bench.count(ptx)
        counts[mdt]["ld.global"] = sum(1 for s in bench.instructions(ptx)
                                       if s.startswith("ld.global"))
    # a thread's tile: 64 rows x 64 keys / 128 threads = 32 scores of 16 columns
    plain, f32, f16 = counts[None], counts["float32"], counts["float16"]
    arith = "fma/mul/add f32"
    # the float32 mask: per column a compare, a select and a multiply, a vector load of
    # two columns; per score one fma (without a mask the scale folds into the
    # probabilities' exponent: 32 more), less the two rows' m u (the scores are in base 2
    # already). Before: 391 instructions (the BERT b8 s512 kernel's interior tile; a clamp
    # of m log2 e and a test for minus infinity a column, one load a column)
    assert f32["max/min f32"] == plain["max/min f32"]
    assert f32["setp/selp"] - plain["setp/selp"] == 2 * 16
    assert f32[arith] - plain[arith] == 16 + 32 - 2
    assert f32["ld.global"] == 8
    assert f32["total"] - plain["total"] <= 16 * 3 + 8 + 32 + 4, (f32, plain)
    # float16: a conversion and a multiply a column, no select
    assert f16["setp/selp"] == plain["setp/selp"]
    assert f16["cvt"] - plain["cvt"] == 16
    assert f16["total"] < f32["total"]
    assert counts["bool"]["total"] < f32["total"]
