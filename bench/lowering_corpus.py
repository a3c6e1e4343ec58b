"""A fixed set of ~20 schedules whose lowering is timed and checked byte for byte.

Each entry is a name, a target and a function returning ``(schedule, tensors)``: the
tutorial's seed schedule, AutoTVM's conv template, and the default schedules of the kinds
of kernels tuning builds most (tensor-core GEMMs with wgmma on sm_90a and mma.sync on
sm_80, convolutions as implicit GEMMs, CUDA-core convolutions, reductions, softmax,
pooling, element-wise work). Used by ``bench/bench_lowering.py``.
"""

from __future__ import annotations

from collections.abc import Callable

from ptxforge import ops, te, workloads
from ptxforge.ops.schedules import default_schedule

SM90A = "cuda -arch=sm_90a"
SM80 = "cuda -arch=sm_80"


def _seed():
    s, tensors, _ = workloads.seed_schedule()
    return s, tensors


def _autotvm_conv():
    return workloads.conv2d_no_batching_schedule()


def _seed_default(target):
    def make():
        tensors = workloads.conv2d_layer(*workloads.SEED_ARGS)
        return default_schedule(tensors[-1], target), tensors
    return make


def _dense(M, N, K, target, dtype="float16", bias=True, relu=True):
    def make():
        x = te.placeholder((M, K), dtype, name="x")
        w = te.placeholder((N, K), dtype, name="w")
        args = [x, w]
        b = None
        if bias:
            b = te.placeholder((N,), dtype, name="b")
            args.append(b)
        y = ops.nn.dense(x, w, b)
        if relu:
            y = ops.nn.relu(y)
        return default_schedule(y, target), args + [y]
    return make


def _batch_matmul(B, M, N, K, target):
    def make():
        x = te.placeholder((B, M, K), "float16", name="x")
        w = te.placeholder((B, N, K), "float16", name="w")
        y = ops.nn.batch_matmul(x, w)
        return default_schedule(y, target), [x, w, y]
    return make


def _conv_nhwc(n, h, w, ci, co, k, stride, pad, target, dtype="float16"):
    def make():
        d = te.placeholder((n, h, w, ci), dtype, name="data")
        kern = te.placeholder((k, k, ci, co), dtype, name="kernel")
        b = te.placeholder((co,), dtype, name="bias")
        y = ops.nn.conv2d_nhwc(d, kern, stride, pad, out_dtype=dtype)
        y = te.compute(y.shape, lambda *i, y=y: y[i] + b[i[3]], name="T_add")
        y = ops.nn.relu(y)
        return default_schedule(y, target), [d, kern, b, y]
    return make


def _depthwise(target):
    def make():
        d = te.placeholder((1, 32, 56, 56), name="data")
        k = te.placeholder((32, 1, 3, 3), name="kernel")
        y = ops.nn.depthwise_conv2d_nchw(d, k, 1, 1, 1)
        return default_schedule(y, target), [d, k, y]
    return make


def _softmax(target, dtype="float32"):
    def make():
        x = te.placeholder((128, 768), dtype, name="x")
        y = ops.nn.softmax(x, axis=-1)
        return default_schedule(y, target), [x, y]
    return make


def _pool(target):
    def make():
        x = te.placeholder((1, 64, 56, 56), name="x")
        y = ops.nn.max_pool2d(x, (3, 3), (2, 2), (1, 1))
        return default_schedule(y, target), [x, y]
    return make


def _global_pool(target):
    def make():
        x = te.placeholder((4, 512, 7, 7), name="x")
        y = ops.nn.global_avg_pool2d(x)
        return default_schedule(y, target), [x, y]
    return make


def _elementwise(target):
    def make():
        x = te.placeholder((64, 128, 28), name="x")
        b = te.placeholder((128, 1), name="b")
        y = ops.nn.relu(ops.add(ops.multiply(x, 2.0), b))
        return default_schedule(y, target), [x, b, y]
    return make


CORPUS: dict[str, tuple[str, Callable]] = {
    "seed_schedule": (SM90A, _seed),
    "autotvm_conv2d_no_batching": (SM90A, _autotvm_conv),
    "seed_layer_default_sm90a": (SM90A, _seed_default(SM90A)),
    "dense_fp16_256x256x256_sm90a": (SM90A, _dense(256, 256, 256, SM90A)),
    "dense_fp16_512x1024x768_sm90a": (SM90A, _dense(512, 1024, 768, SM90A)),
    "dense_fp16_128x3072x768_sm90a": (SM90A, _dense(128, 3072, 768, SM90A, relu=False)),
    "dense_fp16_32x1000x512_sm90a": (SM90A, _dense(32, 1000, 512, SM90A)),
    "dense_fp16_256x256x256_sm80": (SM80, _dense(256, 256, 256, SM80)),
    "dense_fp16_512x1024x768_sm80": (SM80, _dense(512, 1024, 768, SM80)),
    "dense_bf16_128x768x3072_sm80": (SM80, _dense(128, 768, 3072, SM80, "bfloat16")),
    "batch_matmul_fp16_12x128x128x64_sm90a": (SM90A, _batch_matmul(12, 128, 128, 64, SM90A)),
    "conv_nhwc_fp16_r18_3x3_64_sm80": (SM80, _conv_nhwc(1, 56, 56, 64, 64, 3, 1, 1, SM80)),
    "conv_nhwc_fp16_r18_3x3_64_sm90a": (SM90A, _conv_nhwc(1, 56, 56, 64, 64, 3, 1, 1, SM90A)),
    "conv_nhwc_fp16_r18_3x3_256_s2_sm90a": (
        SM90A, _conv_nhwc(1, 28, 28, 128, 256, 3, 2, 1, SM90A)),
    "conv_nhwc_fp16_1x1_b16_sm80": (SM80, _conv_nhwc(16, 14, 14, 256, 256, 1, 1, 0, SM80)),
    "depthwise_nchw_sm90a": (SM90A, _depthwise(SM90A)),
    "softmax_sm90a": (SM90A, _softmax(SM90A)),
    "softmax_fp16_sm80": (SM80, _softmax(SM80, "float16")),
    "max_pool_sm90a": (SM90A, _pool(SM90A)),
    "global_avg_pool_sm80": (SM80, _global_pool(SM80)),
    "elementwise_sm90a": (SM90A, _elementwise(SM90A)),
}
"""name -> (target, make): ``make()`` returns ``(schedule, tensors)``."""
