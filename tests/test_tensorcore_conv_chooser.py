"""The mma.sync conv chooser is the products' chooser on the implicit GEMM: its picks (split-K
on layers of few pixels), the wgmma choice against it, and its kernels on the simulator
against float64 numpy, split-K included."""

from __future__ import annotations

import pytest

from ptxforge.ops.schedules import default_schedule
from ptxforge.ops.schedules.gemm import chooser
from ptxforge.ops.schedules.gemm.chooser import (
    choose_conv_config,
    choose_gemm_config,
    conv_config,
    wgmma_conv_choice,
)
from ptxforge.ops.schedules.gemm.estimate import gemm_time
from ptxforge.ops.schedules.gemm.forms import conv_gemm_form
from ptxforge.ops.schedules.gemm.rules import check_conv_config

from .test_tensorcore_conv import check, conv_layer, inlined_schedule, run

SM80 = "cuda -arch=sm_80"
SM90A = "cuda -arch=sm_90a"


def _conv(shape, dtype="float16", epilogue=""):
    tensors, arrays, reference = conv_layer(*shape, dtype, epilogue,
                                            precision="tf32" if dtype == "float32" else None)
    _, conv = inlined_schedule(tensors[-1])
    return tensors, arrays, reference, conv


def test_the_default_schedule_pads_the_implicit_gemm_to_the_chosen_tiles():
    (tensors, _, _, conv) = _conv((1, 7, 7, 128, 64, 3, 1, 1), epilogue="bias_relu")
    cfg = choose_conv_config(conv, SM80)
    assert cfg == conv_config(conv, SM80)
    text = str(default_schedule(tensors[-1], target=SM80).pipeline)
    # the implicit GEMM padded to the chosen tiles (K to whole split-K parts)
    assert (f"implicit_gemm(conv2d_nhwc, pad_m={cfg.block_m}, pad_n={cfg.block_n}, "
            f"pad_k={cfg.block_k * cfg.split_k})") in text


@pytest.mark.parametrize("target", [SM80, SM90A])
@pytest.mark.parametrize("shape", [(1, 7, 7, 512, 512, 3, 1, 1), (1, 28, 28, 128, 128, 3, 1, 1),
                                   (1, 56, 56, 64, 64, 1, 1, 0), (16, 14, 14, 256, 256, 3, 1, 1),
                                   (1, 224, 224, 4, 64, 7, 2, 3)],
                         ids=["7x7_512", "28x28_128", "56x56_1x1", "b16_14x14", "stem_c4"])
def test_the_conv_chooser_is_the_products_chooser_on_the_implicit_gemm(shape, target):
    conv = _conv(shape)[3]
    form = conv_gemm_form(conv)
    est = conv_config(conv, target)
    assert est == choose_gemm_config(form, target)
    check_conv_config(est, conv, target)
    # the estimate's own fastest (within the near-tie) of every candidate
    fastest = min(gemm_time(c, form, target) for c in chooser.gemm_candidates(form, target))
    assert gemm_time(est, form, target) <= fastest * chooser.NEAR_TIE


def test_a_batch_1_layer_of_few_pixels_splits_the_reduction():
    """7x7 pixels, K = 4608: 64 x 64 tiles in split-K parts. The count of waves x tile
    work that ranked conv tiles before took 16 x 16 tiles over the whole reduction: on an
    H100 on mma.sync only 18.1 us against 5.2 us for this pick (docs/tensor_cores.md); an
    H200 tuning of the same layer found split-K 8 of 32 x 32 tiles 2.6x faster than the
    count's pick (bench/results/conv_tensorcore_h200.txt)."""
    conv = _conv((1, 7, 7, 512, 512, 3, 1, 1))[3]
    est = conv_config(conv, SM80)
    assert est.split_k >= 4 and est.block_m * est.block_n >= 32 * 32


def test_wgmma_choice_follows_the_estimate_of_its_mma_sync_rival():
    from ptxforge.ops.schedules.gemm.estimate import wgmma_time

    for shape in ((1, 7, 7, 512, 512, 3, 1, 1), (1, 14, 14, 128, 256, 1, 1, 0)):
        conv = _conv(shape)[3]
        w = wgmma_conv_choice(conv, None, SM90A)
        rival = conv_config(conv, SM90A)
        form = conv_gemm_form(conv)
        assert (w is not None) == (gemm_time(rival, form, SM90A)
                                   > wgmma_time(chooser.wgmma_conv_config(conv, SM90A), form,
                                                SM90A, True))


@pytest.mark.parametrize("shape,dtype,epilogue", [
    ((1, 7, 7, 128, 64, 3, 1, 1), "float16", "bias_relu"),       # split-K over K = 1152
    ((2, 6, 6, 24, 40, 3, 1, 1), "float16", "bias_add_relu"),    # odd extents, residual
    ((1, 5, 5, 32, 16, 3, 2, 1), "float32", "bias_relu"),        # TF32, stride 2
], ids=["splitk_7x7", "odd_residual", "tf32_s2"])
def test_default_kernels_compute_the_convolution(shape, dtype, epilogue):
    tensors, arrays, reference, conv = _conv(shape, dtype, epilogue)
    cfg = choose_conv_config(conv, SM80)
    if shape[3] == 128:
        assert cfg.split_k > 1, cfg
    _, got = run(tensors, arrays, default_schedule(tensors[-1], target=SM80))
    check(got, reference(), dtype)
