"""The default conv schedules choose their tiles knowing the fused epilogue: a residual's
reads (``epilogue_reads``) move the mma.sync conv to split-K or to fewer elements a thread,
as they move the wgmma conv; the wgmma-or-mma.sync choice weighs both picks with them; the
picks compute the convolution on the simulator."""

from __future__ import annotations

import numpy as np
import pytest

from ptxforge import build
from ptxforge.ops.schedules import default_schedule
from ptxforge.ops.schedules.gemm.choice import prefer_wgmma
from ptxforge.ops.schedules.gemm.chooser import (
    conv_config,
    epilogue_reads,
    wgmma_conv_choice,
    wgmma_conv_config,
)
from ptxforge.ops.schedules.gemm.forms import conv_gemm_form
from ptxforge.ops.schedules.gemm.schedule import (
    schedule_conv2d_nhwc_tensorcore,
    schedule_conv2d_nhwc_wgmma,
)

from .test_tensorcore_conv import check, conv_layer, inlined_schedule

SM80 = "cuda -arch=sm_80"
SM90A = "cuda -arch=sm_90a"


def _layer(shape, epilogue="bias_add_relu"):
    tensors, arrays, reference = conv_layer(*shape, "float16", epilogue)
    s, conv = inlined_schedule(tensors[-1])
    return tensors, arrays, reference, s, conv, tensors[-1].op


@pytest.mark.parametrize("target", [SM80, SM90A])
def test_the_mma_sync_conv_default_takes_the_epilogue_aware_tiles(target):
    # 64 pixels, 128 <- 256: the residual moves the pick to 2 split-K parts, whose second
    # kernel adds it; told nothing, 32 x 16 tiles in one part
    _, _, _, s, conv, epi = _layer((1, 8, 8, 256, 128, 1, 1, 0))
    assert epilogue_reads(conv, epi) == 1
    aware, blind = conv_config(conv, target, epi), conv_config(conv, target)
    assert aware.split_k == 2 and blind.split_k == 1
    assert schedule_conv2d_nhwc_tensorcore(s, conv, epi, target) == aware


@pytest.mark.parametrize("epilogue", ["", "bias_relu"])
def test_without_a_residual_the_tiles_are_those_of_the_convolution_alone(epilogue):
    _, _, _, s, conv, epi = _layer((1, 8, 8, 256, 128, 1, 1, 0), epilogue)
    epi = None if epi is conv else epi
    assert epilogue_reads(conv, epi) == 0
    assert schedule_conv2d_nhwc_tensorcore(s, conv, epi, SM80) == conv_config(conv, SM80)


def test_the_wgmma_conv_default_takes_the_epilogue_aware_tiles():
    # 49 pixels, 2048 <- 512 (ResNet-50's last residual layers): 2 split-K parts
    _, _, _, s, conv, epi = _layer((1, 7, 7, 512, 2048, 1, 1, 0))
    aware = wgmma_conv_config(conv, SM90A, epi)
    assert aware.split_k == 2 and wgmma_conv_config(conv, SM90A).split_k == 1
    assert schedule_conv2d_nhwc_wgmma(s, conv, epi, SM90A) == aware


def test_the_choice_of_kind_weighs_the_mma_sync_pick_that_knows_the_residual():
    # ResNet-50's first residual layer (3,136 pixels, 256 <- 64): against the mma.sync
    # tiles of the convolution alone wgmma won; against those the schedule takes with the
    # residual (8 elements a thread) mma.sync does. Its tuned records measured mma.sync
    # tiles fastest there (2.90 us for 32 x 64 x 64 against 3.61 for the wgmma pick)
    _, _, _, _, conv, epi = _layer((1, 56, 56, 64, 256, 1, 1, 0))
    form, reads = conv_gemm_form(conv), epilogue_reads(conv, epi)
    w = wgmma_conv_config(conv, SM90A, epi)
    assert prefer_wgmma(form, w, conv_config(conv, SM90A), True, SM90A, reads)
    assert not prefer_wgmma(form, w, conv_config(conv, SM90A, epi), True, SM90A, reads)
    assert wgmma_conv_choice(conv, epi, SM90A) is None
    text = str(default_schedule(conv_layer(1, 56, 56, 64, 256, 1, 1, 0, "float16",
                                           "bias_add_relu")[0][-1], target=SM90A).pipeline)
    assert "mma_m16n8k16" in text and "wgmma" not in text


@pytest.mark.parametrize("target", ["sim", "sim -arch=sm_90a"])
def test_the_epilogue_aware_default_computes_the_convolution(target):
    tensors, arrays, reference, _, conv, epi = _layer((1, 8, 8, 256, 128, 1, 1, 0))
    s = default_schedule(tensors[-1], target=target)
    if target == "sim":  # mma.sync: the residual's pick, in 2 split-K parts
        assert conv_config(conv, target, epi).split_k == 2
        assert "split(conv2d_nhwc.gemm.k, nparts=2)" in str(s.pipeline)
    mod = build(s, tensors, target=target)
    out = np.full(tensors[-1].shape, np.nan, tensors[-1].dtype)
    mod(*arrays, out)
    check(out.astype(np.float64), reference(), "float16")
