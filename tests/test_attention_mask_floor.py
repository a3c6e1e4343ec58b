"""Additive masks of float32's (and bfloat16's) ``finfo.min``, as exporters write them: the
kernels scale the mask to base 2 and keep it finite (halved below ``MASK_KNEE``), so a row
masked entirely by such a fill averages every key, as the imported graph's float32 softmax of ``s + finfo.min``
does, instead of overflowing to minus infinity and giving zeros; a minus-infinity mask
still empties a row (the kernels' documented zero). The simulator against numpy for the
``mma.sync``, wgmma and wgmma register forms."""

from __future__ import annotations

import numpy as np
import pytest
from ptxforge import backend_sim
from ptxforge.graph.opdefs.elemwise import cast_array
from ptxforge.ops.attention_testing import attention_tolerance
from ptxforge.ops.schedules.attention import (
    AttentionConfig,
    AttentionMask,
    AttentionWorkload,
    attention_module,
)
from ptxforge.ops.testing import widen

RNG = np.random.default_rng(27)
CONFIGS = {
    "mma_sync": AttentionConfig(2, 16, 1),
    "wgmma": AttentionConfig(4, 64, 1, "wgmma"),
    "registers": AttentionConfig(4, 64, 1, "wgmma", "registers"),
}


def _float32_softmax_reference(q, k, v, mask, scale, dtype):
    """The imported graph's computation in float32: ``softmax(q k^T scale + mask) v``,
    where ``s + finfo.min`` rounds to ``finfo.min`` for every key of a fully filled row."""
    qd, kd, vd = (widen(x, dtype).astype(np.float32) for x in (q, k, v))
    s = np.einsum("bhie,bhje->bhij", qd, kd).astype(np.float32) * np.float32(scale)
    s = s + widen(mask, None).astype(np.float32)
    with np.errstate(invalid="ignore"):
        e = np.exp(s - s.max(-1, keepdims=True))
        p = np.where(np.isfinite(s).any(-1, keepdims=True), e / e.sum(-1, keepdims=True), 0)
    return np.einsum("bhij,bhjd->bhid", p, vd).astype(np.float32)


@pytest.mark.parametrize("form", list(CONFIGS))
@pytest.mark.parametrize("mdt", ["float32", "bfloat16"])
def test_a_row_filled_with_finfo_min_averages_every_key(form, mdt):
    lq, s, e = 20, 70, 64
    lo = float(np.finfo(np.float32).min) if mdt == "float32" else -3.3895e38
    m = np.zeros((1, 1, lq, s))
    m[..., 2, :] = lo  # every key: the graph averages them
    m[..., 5, 30:] = lo  # some keys: they drop out
    m[..., 7, :] = -np.inf  # minus infinity everywhere: the kernel's zero row
    m[..., 9, ::2] = -np.inf
    m[..., 9, 1::2] = lo  # minus infinity beside the fill: the fill's keys averaged
    mask = cast_array(m, mdt)
    w = AttentionWorkload(1, 2, 2, lq, s, e, e, "float16", False, 0.2,
                          AttentionMask(mask.shape, mdt))
    sh = w.shapes()
    q, k, v = (cast_array(RNG.standard_normal(sh[n]), "float16") for n in "qkv")
    out = cast_array(np.full(sh["out"], np.nan), "float16")
    backend_sim.run(attention_module(w, CONFIGS[form]), [q, k, v, mask, out])
    got = widen(out, "float16")
    want = _float32_softmax_reference(q, k, v, widen(mask, mdt), 0.2, "float16")
    vmean = v.astype(np.float32).mean(axis=2)
    np.testing.assert_allclose(want[:, :, 2], vmean, atol=1e-5)  # the reference averages
    np.testing.assert_allclose(want[:, :, 9], v[:, :, 1::2].astype(np.float32).mean(2),
                               atol=1e-5)
    assert not want[:, :, 7].any()
    err = np.abs(got - want).max() / max(1.0, np.abs(want).max())
    assert np.isfinite(got).all() and err <= attention_tolerance("float16"), err


@pytest.mark.gpu
@pytest.mark.parametrize("form", list(CONFIGS))
def test_a_row_filled_with_finfo_min_on_the_gpu(form):
    from ptxforge.backend_ptx import array, compile_module, cuda, empty

    dev = cuda(0)
    cfg = CONFIGS[form]
    if cfg.mma == "wgmma" and not dev.target.has_wgmma:
        pytest.skip(f"wgmma needs a Hopper GPU (sm_90a), this one is {dev.sm}")
    lq, s, e = 130, 200, 64
    m = np.zeros((1, 1, lq, s), np.float32)
    m[..., 2, :] = np.finfo(np.float32).min
    m[..., 7, :] = -np.inf
    w = AttentionWorkload(1, 2, 2, lq, s, e, e, "float16", False, 0.2,
                          AttentionMask(m.shape, "float32"))
    sh = w.shapes()
    q, k, v = (cast_array(RNG.standard_normal(sh[n]), "float16") for n in "qkv")
    loaded = compile_module(attention_module(w, cfg), dev.target).load(dev)
    out = empty(sh["out"], "float16", dev)
    loaded(*[array(x, dev, "float16") for x in (q, k, v)], array(m, dev, "float32"), out)
    got = widen(out.numpy(), "float16")
    want = _float32_softmax_reference(q, k, v, m, 0.2, "float16")
    assert np.abs(got - want).max() <= attention_tolerance("float16") * max(
        1.0, np.abs(want).max())
