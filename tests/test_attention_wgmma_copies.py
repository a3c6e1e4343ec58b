"""The wgmma forms' copies at constant offsets (``attention_module(..., copy_offsets=True)``:
each thread's copies of a tile at its first one's addresses plus 64-bit constants): the
same numbers on the simulator in every wgmma form (whole and partial tiles, both layouts),
the default off but for the overlapped form, the constants folded into the ``cp.async``
addresses and, with ptxas, fewer registers."""

from __future__ import annotations

import re

import numpy as np
import pytest
from ptxforge import backend_sim
from ptxforge.backend_ptx.assemble import find_ptxas
from ptxforge.ir.stmt import AsyncCopy, walk
from ptxforge.ops.attention_testing import attention_python, attention_tolerance
from ptxforge.ops.schedules.attention import (
    AttentionConfig,
    AttentionWorkload,
    attention_module,
)
from ptxforge.ops.testing import widen
from ptxforge.target import as_target

from .test_attention_wgmma import _data

H100 = as_target("cuda -arch=sm_90a")
FORMS = [
    AttentionConfig(4, 64, 2, "wgmma"),
    AttentionConfig(8, 64, 1, "wgmma", "registers"),
    AttentionConfig(4, 128, 1, "wgmma", "registers", "registers"),
    AttentionConfig(4, 64, 3, "wgmma"),
]


def _check(w: AttentionWorkload, mod) -> None:
    args = _data(w)
    backend_sim.run(mod, args)
    want = attention_python(*args[:3], None, w.scale, w.causal, dtype=w.dtype,
                            layout=w.layout)
    got = widen(args[-1], w.dtype)
    assert np.isfinite(got).all()
    assert np.abs(got - want).max() <= attention_tolerance(w.dtype) * max(
        1.0, np.abs(want).max())


def _offset_copies(mod) -> tuple:
    cps = [s for s in walk(mod.kernels()[0].body) if isinstance(s, AsyncCopy)]
    return len(cps), sum(c.src_index.dtype == "int64" for c in cps)


@pytest.mark.parametrize("cfg", FORMS, ids=lambda c: str(c.to_dict()))
def test_constant_offsets_give_the_same_numbers(cfg):
    for w in (AttentionWorkload(1, 2, 1, 128, 256, 128, 128, "float16", True),
              AttentionWorkload(2, 2, 2, 130, 200, 64, 64, "bfloat16", False),
              AttentionWorkload(1, 4, 2, 128, 128, 64, 64, "float16", True, layout="bshd")):
        mod = attention_module(w, cfg, copy_offsets=True)
        n, offset = _offset_copies(mod)
        # whole tiles take the offsets; partial ones (here Q's, K's and V's alike) keep
        # their clamps and zero fill
        whole = w.kv_len % cfg.block_kv == 0 and w.q_len % cfg.block_q == 0
        assert offset == (n if whole else 0)
        _check(w, mod)


def test_the_default_is_off_but_for_the_overlapped_form():
    w = AttentionWorkload(1, 2, 2, 128, 256, 64, 64)
    assert _offset_copies(attention_module(w, FORMS[0]))[1] == 0
    ov = AttentionConfig(4, 64, 2, "wgmma", "registers", "registers", "intra")
    n, offset = _offset_copies(attention_module(w, ov))
    assert offset == n > 0
    assert _offset_copies(attention_module(w, ov, copy_offsets=False))[1] == 0
    with pytest.raises(ValueError, match="wgmma forms"):
        attention_module(w, AttentionConfig(4, 64, 2), copy_offsets=True)


def test_ptx_folds_the_constants_into_the_copies_addresses():
    from ptxforge.backend_ptx import compile_module

    w = AttentionWorkload(1, 16, 16, 4096, 4096, 128, 128, "float16", True)
    cfg = FORMS[2]
    src = compile_module(attention_module(w, cfg, copy_offsets=True), H100).get_source("ptx")
    folded = re.findall(r"cp\.async\.cg\.shared\.global \t?\[%rd\d+\+\d+\], \[%rd\d+\+\d+\]",
                        src)
    assert len(folded) >= 14  # of the 16 copies of a step (each tile's first has no offset)
    assert ".local" not in src


@pytest.mark.skipif(find_ptxas() is None, reason="ptxas is not installed")
def test_ptxas_takes_fewer_registers():
    from ptxforge.backend_ptx.compile import compile_kernel

    w = AttentionWorkload(1, 16, 16, 4096, 4096, 128, 128, "float16", True)
    cfg = AttentionConfig(4, 64, 1, "wgmma", "registers", "registers")
    regs = [compile_kernel(attention_module(w, cfg, copy_offsets=on).kernels()[0], H100,
                           stop_after="cubin", assembler="ptxas").resources.registers
            for on in (False, True)]
    # ptxas 13: 165 -> 127 (four blocks of 128 threads an SM by registers instead of three)
    assert regs[1] <= regs[0] - 24, regs


# -- on a GPU ----------------------------------------------------------------------------


@pytest.mark.gpu
@pytest.mark.sanitize
@pytest.mark.parametrize("w", [
    AttentionWorkload(1, 4, 2, 256, 256, 128, 128, "float16", True),
    AttentionWorkload(2, 4, 4, 128, 192, 64, 64, "bfloat16", False),
    AttentionWorkload(1, 4, 2, 128, 128, 64, 64, "float16", True, layout="bshd"),
], ids=lambda w: f"L{w.q_len}-S{w.kv_len}-d{w.head_dim}-{w.layout}")
def test_constant_offsets_on_the_gpu(w):
    from ptxforge.backend_ptx import array, compile_module, cuda, empty

    dev = cuda(0)
    if not dev.target.has_wgmma:
        pytest.skip(f"wgmma needs a Hopper GPU (sm_90a), this one is {dev.sm}")
    for cfg in FORMS:
        loaded = compile_module(attention_module(w, cfg, copy_offsets=True), H100).load(dev)
        args = _data(w)
        out = empty(args[-1].shape, w.dtype, dev)
        loaded(*[array(a, dev, w.dtype) for a in args[:3]], out)
        want = attention_python(*args[:3], None, w.scale, w.causal, dtype=w.dtype,
                                layout=w.layout)
        got = widen(out.numpy(), w.dtype)
        assert np.abs(got - want).max() <= attention_tolerance(w.dtype) * max(
            1.0, np.abs(want).max()), cfg
