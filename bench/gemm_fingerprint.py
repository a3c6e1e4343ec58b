"""A fingerprint of every tensor-core GEMM kernel the compiler writes.

For a fixed set of workloads (dense, matmul, batch_matmul, broadcast batches, scaled FP8
products, conv2d NHWC and NCHW as implicit GEMMs; fp16, bf16, TF32, fp8; sm_80 and sm_90a;
with and without fused epilogues, padded and split-K) this prints, one line a kernel, a
sha256 of the device IR text and of the PTX (llvmlite, no GPU) produced by

- the default schedules (``default_schedule``) and the schedule functions at explicit
  configurations,
- each AutoTVM tensor-core template at its default configuration and a few fixed config
  indices,
- each auto-scheduler tensor-core sketch at its default slot values and a few fixed ones
  (drawn from a seeded generator, by choice index).

A configuration the compiler refuses prints ``rejected`` (it must stay refused). The
output of the code before a redesign of the tensor-core schedules is kept in
``tests/data/gemm_fingerprint.txt``; identical device IR means identical kernels, so
nothing got slower. Usage::

    PYTHONPATH=<parent of the checkout> python3 bench/gemm_fingerprint.py          # print
    PYTHONPATH=... python3 bench/gemm_fingerprint.py --check   # compare with the file
    PYTHONPATH=... python3 bench/gemm_fingerprint.py --write   # regenerate the file
    PYTHONPATH=... python3 bench/gemm_fingerprint.py --only autotvm --no-ptx

``--only`` keeps the cases whose name contains the text; ``--no-ptx`` hashes device IR
only (``--check`` then compares the IR column).
"""

from __future__ import annotations

import argparse
import hashlib
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
DATA = os.path.join(os.path.dirname(HERE), "tests", "data", "gemm_fingerprint.txt")

SM80 = "cuda -arch=sm_80"
SM90A = "cuda -arch=sm_90a"


@dataclass(frozen=True)
class Case:
    """One kernel to fingerprint: ``make()`` returns ``(schedule, tensors)`` for
    ``target`` (called with the target current)."""

    name: str
    target: str
    make: Callable


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def fingerprint(case: Case, ptx: bool = True) -> str:
    """``name ir=<sha> ptx=<sha>``, or ``name rejected`` where the schedule or its
    lowering refuses the configuration."""
    import ptxforge
    from ptxforge.passes.schedule.common import ScheduleError
    from ptxforge.target import as_target

    target = as_target(case.target)
    try:
        with target:
            s, tensors = case.make()
            dev = ptxforge.lower(s, tensors)
    except (ScheduleError, ValueError) as e:
        return f"{case.name} rejected ({type(e).__name__})"
    except Exception as e:  # an instantiation error of a template, a lowering check
        if type(e).__name__ in ("InstantiationError", "VerifyError", "LoweringError",
                                "GpuLimitError", "IntrinError", "WgmmaError"):
            return f"{case.name} rejected ({type(e).__name__})"
        raise
    line = f"{case.name} ir={_sha(str(dev))}"
    if ptx:
        from ptxforge.backend_ptx import compile_module

        line += f" ptx={_sha(compile_module(dev, target).get_source('ptx'))}"
    return line


# -- the workloads -----------------------------------------------------------------------


def _dense(M, N, K, dt="float16", epilogue="none", out_dtype=None, precision=None):
    """``[x, w, (bias, residual,) out]``: ``epilogue`` ``none`` (the float32 product, or
    its cast to ``out_dtype``), ``bias_relu`` or ``bias_gelu_res`` (bias, an
    activation, a residual add, the cast)."""
    from ptxforge import ops, te

    x = te.placeholder((M, K), dt, name="x")
    w = te.placeholder((N, K), dt, name="w")
    args = [x, w]
    y = ops.nn.dense(x, w, out_dtype="float32", precision=precision)
    if epilogue != "none":
        b = te.placeholder((N,), "float32", name="b")
        args.append(b)
        y = ops.add(y, b)
        y = ops.nn.relu(y) if epilogue == "bias_relu" else ops.tanh(y)
        if epilogue == "bias_gelu_res":
            r = te.placeholder((M, N), "float32", name="r")
            args.append(r)
            y = ops.add(y, r)
    if out_dtype is not None:
        y = ops.cast(y, out_dtype)
    return args + [y]


def _matmul_kn(M, N, K, dt="bfloat16", out_dtype=None):
    from ptxforge import ops, te

    a = te.placeholder((M, K), dt, name="a")
    b = te.placeholder((K, N), dt, name="b")
    y = ops.nn.matmul(a, b, out_dtype="float32")
    if out_dtype is not None:
        y = ops.cast(y, out_dtype)
    return [a, b, y]


def _bmm(B, M, N, K, dt="float16", broadcast=False, out_dtype=None):
    from ptxforge import ops, te

    x = te.placeholder((B, M, K), dt, name="x")
    y = te.placeholder((1 if broadcast else B, N, K), dt, name="y")
    z = ops.nn.batch_matmul(x, y, out_dtype="float32")
    if out_dtype is not None:
        z = ops.cast(z, out_dtype)
    return [x, y, z]


def _scaled_mm(M, N, K, ab="float8_e4m3fn", out_dtype="float16"):
    from ptxforge import te
    from ptxforge.ops.scaled_mm import scaled_mm

    a = te.placeholder((M, K), ab, name="A")
    b = te.placeholder((N, K), ab, name="B")
    sa = te.placeholder((1,), "float32", name="scale_a")
    sb = te.placeholder((1,), "float32", name="scale_b")
    return [a, b, sa, sb, scaled_mm(a, b, sa, sb, out_dtype)]


def _conv_nhwc(N, H, W, CI, CO, KH, stride, pad, dt="float16", epilogue=True,
               precision=None):
    from ptxforge import ops, te

    x = te.placeholder((N, H, W, CI), dt, name="x")
    k = te.placeholder((KH, KH, CI, CO), dt, name="k")
    y = ops.nn.conv2d_nhwc(x, k, stride, pad, out_dtype="float32", precision=precision)
    args = [x, k]
    if epilogue:
        b = te.placeholder((CO,), "float32", name="b")
        args.append(b)
        y = ops.cast(ops.nn.relu(ops.add(y, b)), dt if dt != "float32" else "float32")
    return args + [y]


def _conv_nchw(N, CI, H, W, CO, KH, stride, pad, dt="float16"):
    from ptxforge import ops, te

    x = te.placeholder((N, CI, H, W), dt, name="x")
    k = te.placeholder((CO, CI, KH, KH), dt, name="k")
    return [x, k, ops.nn.conv2d_nchw(x, k, stride, pad, out_dtype="float32")]


def _scores_softmax(B, M, N, K):
    """Attention scores and their softmax (the row epilogue ``fuse_ops`` makes)."""
    from ptxforge import ops, te

    q = te.placeholder((B, M, K), "float16", name="q")
    k = te.placeholder((B, N, K), "float16", name="k")
    s = ops.nn.batch_matmul(q, k, out_dtype="float32")
    return [q, k, ops.cast(ops.nn.softmax(s), "float16")]


def _default(decl):
    """``make`` of the default schedule of ``decl()``'s last tensor."""
    def make():
        from ptxforge.ops.schedules import default_schedule

        tensors = decl()
        return default_schedule(tensors[-1]), tensors
    return make


def _product_stage(out):
    """``(product op, epilogue op or None)`` of the tensors of a declaration."""
    from ptxforge.ir.te import ComputeOp

    seen, stack, prod = set(), [out.op], None
    while stack:
        op = stack.pop()
        if id(op) in seen or not isinstance(op, ComputeOp):
            continue
        seen.add(id(op))
        if op.reduce_axis:
            prod = op
        stack.extend(t.op for t in op.input_tensors)
    return prod, (None if out.op is prod else out.op)


def _explicit(decl, schedule):
    """``make`` of ``schedule(s, product op, epilogue op)`` on ``decl()`` with every other
    stage of the epilogue inlined."""
    def make():
        from ptxforge import te
        from ptxforge.ir.te import ComputeOp

        tensors = decl()
        out = tensors[-1]
        prod, epi = _product_stage(out)
        s = te.create_schedule(out.op)
        for t in _between(out, prod):
            s[t].compute_inline()
        schedule(s, prod, epi)
        for t in prod.input_tensors:  # a convolution's padding: into the A tile's copy
            if isinstance(t.op, ComputeOp):
                s[t].compute_inline()
        return s, tensors
    return make


def _between(out, prod):
    from ptxforge.ir.te import ComputeOp

    found, stack, seen = [], [t for t in out.op.input_tensors], set()
    while stack:
        t = stack.pop()
        if id(t.op) in seen or t.op is prod or not isinstance(t.op, ComputeOp):
            continue
        seen.add(id(t.op))
        found.append(t)
        stack.extend(t.op.input_tensors)
    return found


def default_cases() -> list:
    d = _default
    cases = []
    for tgt, tag in ((SM80, "sm80"), (SM90A, "sm90a")):
        cases += [
            Case(f"default/dense_fp16_256x512x256_bias_relu_f16/{tag}", tgt,
                 d(lambda: _dense(256, 512, 256, "float16", "bias_relu", "float16"))),
            Case(f"default/dense_fp16_4096x4096x4096_cast/{tag}", tgt,
                 d(lambda: _dense(4096, 4096, 4096, "float16", "none", "float16"))),
            Case(f"default/dense_fp16_49x100x72_padded/{tag}", tgt,
                 d(lambda: _dense(49, 100, 72, "float16"))),
            Case(f"default/dense_fp16_128x768x3072_split_k_gelu_res/{tag}", tgt,
                 d(lambda: _dense(128, 768, 3072, "float16", "bias_gelu_res", "float16"))),
            Case(f"default/dense_bf16_16x4096x4096/{tag}", tgt,
                 d(lambda: _dense(16, 4096, 4096, "bfloat16", "none", "bfloat16"))),
            Case(f"default/dense_tf32_128x128x64/{tag}", tgt,
                 d(lambda: _dense(128, 128, 64, "float32", precision="tf32"))),
            Case(f"default/matmul_kn_bf16_128x256x128/{tag}", tgt,
                 d(lambda: _matmul_kn(128, 256, 128, "bfloat16", "bfloat16"))),
            Case(f"default/batch_matmul_fp16_12x128x64x128/{tag}", tgt,
                 d(lambda: _bmm(12, 128, 64, 128, "float16", out_dtype="float16"))),
            Case(f"default/batch_matmul_broadcast_fp16_4x64x64x64/{tag}", tgt,
                 d(lambda: _bmm(4, 64, 64, 64, "float16", broadcast=True))),
            Case(f"default/conv_nhwc_fp16_1x14x14x64x128_3x3_bias_relu/{tag}", tgt,
                 d(lambda: _conv_nhwc(1, 14, 14, 64, 128, 3, 1, 1))),
            Case(f"default/conv_nhwc_fp16_16x56x56x64x64_3x3/{tag}", tgt,
                 d(lambda: _conv_nhwc(16, 56, 56, 64, 64, 3, 1, 1, epilogue=False))),
            Case(f"default/conv_nhwc_bf16_1x7x7x512x512_3x3/{tag}", tgt,
                 d(lambda: _conv_nhwc(1, 7, 7, 512, 512, 3, 1, 1, "bfloat16"))),
            Case(f"default/conv_nhwc_tf32_1x14x14x32x64_1x1/{tag}", tgt,
                 d(lambda: _conv_nhwc(1, 14, 14, 32, 64, 1, 1, 0, "float32",
                                      precision="tf32"))),
            Case(f"default/conv_nchw_fp16_1x64x14x14x64_3x3/{tag}", tgt,
                 d(lambda: _conv_nchw(1, 64, 14, 14, 64, 3, 1, 1))),
            Case(f"default/scores_softmax_12x128x128x64/{tag}", tgt,
                 d(lambda: _scores_softmax(12, 128, 128, 64))),
        ]
    cases += [
        Case("default/scaled_mm_e4m3_f16_256x256x256/sm90a", SM90A,
             d(lambda: _scaled_mm(256, 256, 256, "float8_e4m3fn", "float16"))),
        Case("default/scaled_mm_e5m2_bf16_100x192x160/sm90a", SM90A,
             d(lambda: _scaled_mm(100, 192, 160, "float8_e5m2", "bfloat16"))),
        Case("default/scaled_mm_e4m3_f32_4096x4096x4096/sm90a", SM90A,
             d(lambda: _scaled_mm(4096, 4096, 4096, "float8_e4m3fn", "float32"))),
    ]
    return cases


def explicit_cases() -> list:
    """The schedule functions at explicit configurations (every kernel writer)."""
    from ptxforge.ops.schedules.gemm.knobs import TensorCoreConfig, WgmmaScheduleConfig
    from ptxforge.ops.schedules.gemm.schedule import (
        dense_tensorcore_compute,
        schedule_conv2d_nhwc_tensorcore,
        schedule_conv2d_nhwc_wgmma,
        schedule_gemm_tensorcore,
        schedule_gemm_wgmma,
    )
    from ptxforge.tests.tensorcore_dense import schedule_dense_tensorcore, schedule_dense_wgmma

    TC, WG = TensorCoreConfig, WgmmaScheduleConfig

    def dense_tc(M, N, K, dt, out, layout, cfg, acc="float32"):
        def make():
            tensors = dense_tensorcore_compute(M, N, K, dt, out_dtype=out, acc_dtype=acc,
                                               b_layout=layout)
            return schedule_dense_tensorcore(tensors, cfg), tensors
        return make

    def dense_wg(M, N, K, dt, out, cfg):
        def make():
            tensors = dense_tensorcore_compute(M, N, K, dt, out_dtype=out)
            return schedule_dense_wgmma(tensors, cfg, SM90A), tensors
        return make

    def gemm_tc(decl, cfg):
        return _explicit(decl, lambda s, op, epi: schedule_gemm_tensorcore(s, op, epi, cfg))

    def gemm_wg(decl, cfg):
        return _explicit(decl, lambda s, op, epi: schedule_gemm_wgmma(s, op, epi, cfg,
                                                                       SM90A))

    def conv_tc(decl, cfg):
        return _explicit(decl, lambda s, op, epi: schedule_conv2d_nhwc_tensorcore(
            s, op, epi, SM80, cfg))

    def conv_wg(decl, cfg):
        return _explicit(decl, lambda s, op, epi: schedule_conv2d_nhwc_wgmma(
            s, op, epi, SM90A, cfg))

    pipelined = TC(64, 64, 32, 2, 2, stages=3, async_copy=True)
    return [
        Case("explicit/dense_tensorcore_fp16_128x128x64_cast", SM80,
             dense_tc(128, 128, 64, "float16", "float16", "nk", TC(64, 64, 32, 2, 2))),
        Case("explicit/dense_tensorcore_bf16_kn_pipelined", SM80,
             dense_tc(128, 128, 128, "bfloat16", "float32", "kn", pipelined)),
        Case("explicit/dense_tensorcore_tf32_lane_loads", SM80,
             dense_tc(64, 64, 64, "float32", "float32", "nk",
                      TC(32, 32, 16, 1, 2, vec=4, pad=4, tf32=True, frag_load="load"))),
        Case("explicit/dense_tensorcore_fp16_acc_plain", SM80,
             dense_tc(64, 64, 64, "float16", "float16", "nk",
                      TC(32, 64, 32, 1, 2, pad=0, unroll=False), acc="float16")),
        Case("explicit/dense_wgmma_fp16_128x256x128", SM90A,
             dense_wg(128, 256, 128, "float16", "float16", WG(128, 2, 2, 0))),
        Case("explicit/dense_wgmma_bf16_in_flight", SM90A,
             dense_wg(128, 128, 256, "bfloat16", "float32", WG(128, 1, 4, 1))),
        Case("explicit/gemm_tensorcore_bias_relu_split4", SM80,
             gemm_tc(lambda: _dense(64, 128, 512, "float16", "bias_relu", "float16"),
                     TC(32, 64, 32, 1, 2, stages=2, async_copy=True, split_k=4))),
        Case("explicit/gemm_tensorcore_kn_padded", SM80,
             gemm_tc(lambda: _matmul_kn(50, 72, 40, "float16"),
                     TC(32, 32, 16, 2, 1, vec=8, stages=2, async_copy=True))),
        Case("explicit/gemm_tensorcore_batch_direct", SM80,
             gemm_tc(lambda: _bmm(3, 64, 64, 64, "bfloat16", out_dtype="bfloat16"),
                     TC(64, 32, 32, 2, 1, stages=2, async_copy=True))),
        Case("explicit/gemm_tensorcore_tf32_split2", SM80,
             gemm_tc(lambda: _dense(64, 64, 256, "float32", precision="tf32"),
                     TC(32, 32, 32, 1, 2, vec=4, pad=4, tf32=True, split_k=2))),
        Case("explicit/gemm_wgmma_bias_relu_split2", SM90A,
             gemm_wg(lambda: _dense(128, 256, 1024, "float16", "bias_relu", "float16"),
                     WG(128, 1, 3, 1, 2))),
        Case("explicit/gemm_wgmma_kn_panels", SM90A,
             gemm_wg(lambda: _matmul_kn(128, 256, 256, "float16", "float16"),
                     WG(256, 2, 2, 0))),
        Case("explicit/gemm_wgmma_batch_padded", SM90A,
             gemm_wg(lambda: _bmm(2, 100, 96, 80, "float16"), WG(64, 2, 1, 0))),
        Case("explicit/gemm_wgmma_fp8_e5m2", SM90A,
             gemm_wg(lambda: _scaled_mm(128, 128, 256, "float8_e5m2", "float16"),
                     WG(128, 1, 2, 0))),
        Case("explicit/conv_tensorcore_split2", SM80,
             conv_tc(lambda: _conv_nhwc(1, 14, 14, 64, 64, 3, 1, 1),
                     TC(64, 64, 32, 2, 2, stages=2, async_copy=True, split_k=2))),
        Case("explicit/conv_tensorcore_stem_vec", SM80,
             conv_tc(lambda: _conv_nhwc(1, 16, 16, 4, 32, 3, 2, 1, epilogue=False),
                     TC(32, 32, 16, 2, 1, vec=4, stages=1))),
        Case("explicit/conv_tensorcore_tf32", SM80,
             conv_tc(lambda: _conv_nhwc(1, 8, 8, 16, 32, 1, 1, 0, "float32",
                                        precision="tf32"),
                     TC(32, 32, 16, 2, 2, vec=4, pad=4, tf32=True))),
        Case("explicit/conv_wgmma_split2", SM90A,
             conv_wg(lambda: _conv_nhwc(1, 14, 14, 64, 128, 3, 1, 1),
                     WG(128, 1, 3, 1, 2))),
        Case("explicit/conv_wgmma_256", SM90A,
             conv_wg(lambda: _conv_nhwc(2, 7, 7, 256, 256, 3, 1, 1, epilogue=False),
                     WG(256, 2, 2, 0))),
    ]


def _autotvm_template_cases() -> list:
    import ptxforge.autotvm.tensorcore_conv  # noqa: F401  (registers the templates)
    import ptxforge.autotvm.tensorcore_dense  # noqa: F401
    import ptxforge.autotvm.tensorcore_wgmma  # noqa: F401

    conv = (1, 14, 14, 64, 128, 3, 3, (1, 1), (1, 1), "float16")
    return [
        ("dense_tensorcore.cuda", (128, 256, 512, "float16"), SM80),
        ("dense_tensorcore.cuda", (64, 64, 64, "float32", "float32"), SM80),
        ("batch_matmul_tensorcore.cuda", (2, 64, 64, 128, "bfloat16"), SM80),
        ("conv2d_nhwc_tensorcore.cuda", conv, SM80),
        ("dense_wgmma.cuda", (128, 256, 512, "float16"), SM90A),
        ("batch_matmul_wgmma.cuda", (2, 128, 128, 256, "bfloat16"), SM90A),
        ("conv2d_nhwc_wgmma.cuda", conv, SM90A),
    ]


AUTOTVM_POINTS = 4
"""Config indices per template besides the default (drawn with a fixed seed)."""


def autotvm_cases() -> list:
    from ptxforge import autotvm

    cases = []
    for name, args, tgt in _autotvm_template_cases():
        task = autotvm.task.create(name, args=args, target=tgt)
        space = task.config_space
        rng = np.random.default_rng(7)
        points = [None] + [int(x) for x in rng.integers(0, len(space), AUTOTVM_POINTS)]
        label = "_".join(str(a) for a in args if not isinstance(a, tuple))
        for p in points:
            def make(task=task, p=p):
                cfg = task.default_config() if p is None else task.config_space.get(p)
                return task.instantiate(cfg)
            cases.append(Case(f"autotvm/{name}/{label}/{'default' if p is None else p}",
                              tgt, make))
    return cases


SKETCH_POINTS = 4
"""Slot values per sketch besides the default row (drawn with a fixed seed)."""


def _sketch_tasks() -> list:
    from ptxforge import autosched

    def dense_layer(M, N, K, dt):
        return _dense(M, N, K, dt, "bias_relu", dt)

    def conv_layer(N, H, W, CI, CO, KH, dt):
        return _conv_nhwc(N, H, W, CI, CO, KH, 1, KH // 2, dt)

    for f in (dense_layer, conv_layer, _bmm, _matmul_kn):
        autosched.register_workload(f, override=True)
    return [
        (dense_layer, (64, 128, 256, "float16"), SM80),
        (dense_layer, (128, 256, 512, "float16"), SM90A),
        (_bmm, (2, 64, 64, 128, "bfloat16"), SM80),
        (_matmul_kn, (128, 128, 256, "float16"), SM90A),
        (conv_layer, (1, 14, 14, 64, 128, 3, "float16"), SM80),
        (conv_layer, (1, 14, 14, 64, 128, 3, "float16"), SM90A),
    ]


TC_SKETCHES = ("tensorcore", "wgmma")


def autosched_cases() -> list:
    from ptxforge import autosched
    from ptxforge.autosched.printer import schedule_from_pipeline
    from ptxforge.autosched.state import State

    cases = []
    for func, args, tgt in _sketch_tasks():
        task = autosched.SearchTask(func=func, args=args, target=tgt)
        label = func.__name__ + "_" + "_".join(str(a) for a in args)
        tag = "sm80" if tgt == SM80 else "sm90a"
        for k, sk in enumerate(task.sketches):
            if not sk.name.startswith(TC_SKETCHES):
                continue
            rng = np.random.default_rng(11)
            rows = [tuple(int(v) for v in sk.default_row())]
            for _ in range(SKETCH_POINTS):
                rows.append(tuple(int(rng.integers(0, len(sl.choices))) for sl in sk.slots))
            for row in rows:
                desc = sk.describe(row)
                vals = ",".join(f"{n.split('.')[-1]}={v}" for n, v in sorted(desc.items()))

                def make(task=task, k=k, row=row):
                    text = State(k, row).pipeline_text(task)
                    s = schedule_from_pipeline(task, text)
                    return s, list(task.ir_dag.tensors)
                cases.append(Case(f"autosched/{label}/{tag}/{sk.name}/{vals}", tgt, make))
    return cases


def all_cases() -> list:
    return default_cases() + explicit_cases() + autotvm_cases() + autosched_cases()


QUICK = (
    "default/dense_fp16_256x512x256_bias_relu_f16/sm80",
    "default/dense_fp16_128x768x3072_split_k_gelu_res/sm90a",
    "default/conv_nhwc_fp16_1x14x14x64x128_3x3_bias_relu/sm90a",
    "default/scaled_mm_e5m2_bf16_100x192x160/sm90a",
    "explicit/conv_tensorcore_split2",
    "explicit/gemm_wgmma_kn_panels",
)
"""A handful of cases the fast test suite checks (device IR only)."""


def read_expected(path: str = DATA) -> dict:
    """``{name: line}`` of the saved fingerprint."""
    out = {}
    with open(path) as f:
        for line in f:
            line = line.rstrip("\n")
            if line and not line.startswith("#"):
                out[line.split(" ", 1)[0]] = line
    return out


def _ir_only(line: str) -> str:
    return " ".join(w for w in line.split(" ") if not w.startswith("ptx="))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", action="store_true", help="compare with the saved file")
    ap.add_argument("--write", action="store_true", help="regenerate the saved file")
    ap.add_argument("--only", default="", help="cases whose name contains this text")
    ap.add_argument("--no-ptx", action="store_true", help="hash device IR only")
    a = ap.parse_args(argv)
    cases = [c for c in all_cases() if a.only in c.name]
    expected = read_expected() if a.check else {}
    lines, bad = [], 0
    for c in cases:
        line = fingerprint(c, ptx=not a.no_ptx)
        lines.append(line)
        if a.check:
            want = expected.get(c.name)
            if want is not None and a.no_ptx:
                want = _ir_only(want)
            status = "ok" if want == line else ("NEW" if want is None else "DIFF")
            bad += status != "ok"
            print(f"{status:4} {line}" + (f"\n     was {want}" if status == "DIFF" else ""),
                  flush=True)
        else:
            print(line, flush=True)
    if a.write:
        with open(DATA, "w") as f:
            f.write("# bench/gemm_fingerprint.py: sha256 (16 hex) of device IR and PTX of each "
                    "tensor-core kernel\n")
            f.write("\n".join(lines) + "\n")
    if a.check:
        print(f"{len(cases) - bad} of {len(cases)} match", file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
