"""The seed tutorials' workloads and hand-written schedules.

``conv2d_layer`` is the auto-scheduler tutorial's workload; ``seed_schedule`` is its printed
"Equivalent python schedule" written with ptxforge's te API.
"""

from __future__ import annotations

import numpy as np

from . import ops, te
from .ir.compute_dag import ComputeDAG


def conv2d_layer(N, H, W, CO, CI, KH, KW, stride, padding):
    """The auto-scheduler tutorial's workload: conv2d + bias + relu (NCHW)."""
    data = te.placeholder((N, CI, H, W), name="data")
    kernel = te.placeholder((CO, CI, KH, KW), name="kernel")
    bias = te.placeholder((1, CO, 1, 1), name="bias")
    conv = ops.nn.conv2d_nchw(data, kernel, stride, padding, dilation=1, out_dtype="float32")
    out = ops.nn.relu(conv + bias)
    return [data, kernel, bias, out]


SEED_ARGS = (1, 7, 7, 512, 512, 3, 3, (1, 1), (1, 1))


def seed_schedule(args=SEED_ARGS):
    """The tutorial's "Equivalent python schedule", written with ptxforge's te API."""
    data, kernel, bias, compute = conv2d_layer(*args)
    s = te.create_schedule(compute.op)
    T_add = compute.op.input_tensors[0]
    conv = T_add.op.input_tensors[0]
    pad_temp = conv.op.input_tensors[0]
    compute_nn, compute_ff, compute_yy, compute_xx = s[conv].op.axis
    compute_rc, compute_ry, compute_rx = s[conv].op.reduce_axis
    compute_i0, compute_i1, compute_i2, compute_i3 = s[compute].op.axis
    s[T_add].compute_inline()
    c = s[conv]
    compute_nn_o_i, compute_nn_i = c.split(compute_nn, factor=1)
    compute_nn_o_o_i, compute_nn_o_i = c.split(compute_nn_o_i, factor=1)
    compute_nn_o_o_o_i, compute_nn_o_o_i = c.split(compute_nn_o_o_i, factor=1)
    compute_nn_o_o_o_o, compute_nn_o_o_o_i = c.split(compute_nn_o_o_o_i, factor=1)
    compute_ff_o_i, compute_ff_i = c.split(compute_ff, factor=1)
    compute_ff_o_o_i, compute_ff_o_i = c.split(compute_ff_o_i, factor=2)
    compute_ff_o_o_o_i, compute_ff_o_o_i = c.split(compute_ff_o_o_i, factor=2)
    compute_ff_o_o_o_o, compute_ff_o_o_o_i = c.split(compute_ff_o_o_o_i, factor=2)
    compute_yy_o_i, compute_yy_i = c.split(compute_yy, factor=1)
    compute_yy_o_o_i, compute_yy_o_i = c.split(compute_yy_o_i, factor=1)
    compute_yy_o_o_o_i, compute_yy_o_o_i = c.split(compute_yy_o_o_i, factor=7)
    compute_yy_o_o_o_o, compute_yy_o_o_o_i = c.split(compute_yy_o_o_o_i, factor=1)
    compute_xx_o_i, compute_xx_i = c.split(compute_xx, factor=1)
    compute_xx_o_o_i, compute_xx_o_i = c.split(compute_xx_o_i, factor=1)
    compute_xx_o_o_o_i, compute_xx_o_o_i = c.split(compute_xx_o_o_i, factor=7)
    compute_xx_o_o_o_o, compute_xx_o_o_o_i = c.split(compute_xx_o_o_o_i, factor=1)
    compute_rc_o_i, compute_rc_i = c.split(compute_rc, factor=32)
    compute_rc_o_o, compute_rc_o_i = c.split(compute_rc_o_i, factor=4)
    compute_ry_o_i, compute_ry_i = c.split(compute_ry, factor=1)
    compute_ry_o_o, compute_ry_o_i = c.split(compute_ry_o_i, factor=1)
    compute_rx_o_i, compute_rx_i = c.split(compute_rx, factor=1)
    compute_rx_o_o, compute_rx_o_i = c.split(compute_rx_o_i, factor=1)
    c.reorder(compute_nn_o_o_o_o, compute_ff_o_o_o_o, compute_yy_o_o_o_o, compute_xx_o_o_o_o,
              compute_nn_o_o_o_i, compute_ff_o_o_o_i, compute_yy_o_o_o_i, compute_xx_o_o_o_i,
              compute_nn_o_o_i, compute_ff_o_o_i, compute_yy_o_o_i, compute_xx_o_o_i,
              compute_rc_o_o, compute_ry_o_o, compute_rx_o_o, compute_rc_o_i, compute_ry_o_i,
              compute_rx_o_i, compute_nn_o_i, compute_ff_o_i, compute_yy_o_i, compute_xx_o_i,
              compute_rc_i, compute_ry_i, compute_rx_i, compute_nn_i, compute_ff_i,
              compute_yy_i, compute_xx_i)
    r = s[compute]
    compute_i0_o_i, compute_i0_i = r.split(compute_i0, factor=1)
    compute_i0_o_o_i, compute_i0_o_i = r.split(compute_i0_o_i, factor=1)
    compute_i0_o_o_o, compute_i0_o_o_i = r.split(compute_i0_o_o_i, factor=1)
    compute_i1_o_i, compute_i1_i = r.split(compute_i1, factor=2)
    compute_i1_o_o_i, compute_i1_o_i = r.split(compute_i1_o_i, factor=2)
    compute_i1_o_o_o, compute_i1_o_o_i = r.split(compute_i1_o_o_i, factor=2)
    compute_i2_o_i, compute_i2_i = r.split(compute_i2, factor=1)
    compute_i2_o_o_i, compute_i2_o_i = r.split(compute_i2_o_i, factor=7)
    compute_i2_o_o_o, compute_i2_o_o_i = r.split(compute_i2_o_o_i, factor=1)
    compute_i3_o_i, compute_i3_i = r.split(compute_i3, factor=1)
    compute_i3_o_o_i, compute_i3_o_i = r.split(compute_i3_o_i, factor=7)
    compute_i3_o_o_o, compute_i3_o_o_i = r.split(compute_i3_o_o_i, factor=1)
    r.reorder(compute_i0_o_o_o, compute_i1_o_o_o, compute_i2_o_o_o, compute_i3_o_o_o,
              compute_i0_o_o_i, compute_i1_o_o_i, compute_i2_o_o_i, compute_i3_o_o_i,
              compute_i0_o_i, compute_i1_o_i, compute_i2_o_i, compute_i3_o_i, compute_i0_i,
              compute_i1_i, compute_i2_i, compute_i3_i)
    s[conv].compute_at(s[compute], compute_i3_o_i)
    kernel_shared = s.cache_read(kernel, "shared", [conv])
    ks_ax0, ks_ax1, ks_ax2, ks_ax3 = tuple(kernel_shared.op.axis)
    s[kernel_shared].compute_at(s[conv], compute_rx_o_o)
    pad_temp_shared = s.cache_read(pad_temp, "shared", [conv])
    ps_ax0, ps_ax1, ps_ax2, ps_ax3 = tuple(pad_temp_shared.op.axis)
    s[pad_temp_shared].compute_at(s[conv], compute_rx_o_o)
    s[pad_temp].compute_inline()
    f0 = r.fuse(compute_i0_o_o_o, compute_i1_o_o_o, compute_i2_o_o_o, compute_i3_o_o_o)
    r.bind(f0, te.thread_axis("blockIdx.x"))
    f1 = r.fuse(compute_i0_o_o_i, compute_i1_o_o_i, compute_i2_o_o_i, compute_i3_o_o_i)
    r.bind(f1, te.thread_axis("vthread"))
    f2 = r.fuse(compute_i0_o_i, compute_i1_o_i, compute_i2_o_i, compute_i3_o_i)
    r.bind(f2, te.thread_axis("threadIdx.x"))
    ks = s[kernel_shared]
    kf = ks.fuse(ks_ax0, ks_ax1, ks_ax2, ks_ax3)
    kf_o, kf_i = ks.split(kf, factor=1)
    ks.vectorize(kf_i)
    kf_o_o, kf_o_i = ks.split(kf_o, factor=98)
    ks.bind(kf_o_i, te.thread_axis("threadIdx.x"))
    ps = s[pad_temp_shared]
    pf = ps.fuse(ps_ax0, ps_ax1, ps_ax2, ps_ax3)
    pf_o, pf_i = ps.split(pf, factor=1)
    ps.vectorize(pf_i)
    pf_o_o, pf_o_i = ps.split(pf_o, factor=98)
    ps.bind(pf_o_i, te.thread_axis("threadIdx.x"))
    s[conv].pragma(compute_nn_o_o_o_o, "auto_unroll_max_step", 0)
    s[conv].pragma(compute_nn_o_o_o_o, "unroll_explicit", True)
    return s, [data, kernel, bias, compute], ComputeDAG([data, kernel, bias, compute])


def reference(data, kernel, bias, stride=(1, 1), padding=(1, 1)):
    """numpy result of :func:`conv2d_layer`."""
    from .ops.testing import conv2d_nchw_python

    return np.maximum(conv2d_nchw_python(data, kernel, stride, padding) + bias, 0.0)


def conv2d_nchw_workload(N, H, W, CO, CI, KH, KW, stride, padding):
    """The AutoTVM tutorial's workload: a plain conv2d (NCHW, no bias)."""
    data = te.placeholder((N, CI, H, W), name="data")
    kernel = te.placeholder((CO, CI, KH, KW), name="kernel")
    conv = ops.nn.conv2d_nchw(data, kernel, stride, padding, dilation=1, out_dtype="float32")
    return [data, kernel, conv]


AUTOTVM_BEST_CONFIG = {
    # the best config the AutoTVM tutorial prints for the seed layer
    "tile_f": [-1, 2, 16, 8],
    "tile_y": [-1, 7, 1, 1],
    "tile_x": [-1, 1, 1, 1],
    "tile_rc": [-1, 16, 1],
    "tile_ry": [-1, 1, 1],
    "tile_rx": [-1, 1, 1],
    "auto_unroll_max_step": 1500,
    "unroll_explicit": 1,
}


def split_by_sizes(stage, axis, sizes):
    """Split ``axis`` into ``len(sizes)`` loops whose inner extents are ``sizes[1:]`` (as
    AutoTVM's ``cfg["tile_x"].apply`` does); returns the loops, outermost first."""
    out = []
    for k in range(len(sizes) - 1):
        factor = int(np.prod(sizes[k + 1:]))
        outer, axis = stage.split(axis, factor=factor)
        out.append(outer)
    out.append(axis)
    return out


def conv2d_no_batching_schedule(args=SEED_ARGS[:7] + SEED_ARGS[7:], cfg=None):
    """The AutoTVM tutorial's ``conv2d_no_batching`` template with fixed knob values
    (``cfg``: a dict like :data:`AUTOTVM_BEST_CONFIG`)."""
    cfg = dict(AUTOTVM_BEST_CONFIG if cfg is None else cfg)
    raw_data, kernel, conv = conv2d_nchw_workload(*args)
    s = te.create_schedule([conv.op])
    pad_data = s[conv].op.input_tensors[0] if hasattr(s[conv].op, "input_tensors") else \
        conv.op.input_tensors[0]
    s[pad_data].compute_inline()
    data = pad_data
    output = conv
    OL = s.cache_write(conv, "local")
    AA = s.cache_read(data, "shared", [OL])
    WW = s.cache_read(kernel, "shared", [OL])
    AL = s.cache_read(AA, "local", [OL])
    WL = s.cache_read(WW, "local", [OL])
    n, f, y, x = s[output].op.axis
    bf, vf, tf, fi = split_by_sizes(s[output], f, cfg["tile_f"])
    by, vy, ty, yi = split_by_sizes(s[output], y, cfg["tile_y"])
    bx, vx, tx, xi = split_by_sizes(s[output], x, cfg["tile_x"])
    kernel_scope = n
    s[output].reorder(n, bf, by, bx, vf, vy, vx, tf, ty, tx, fi, yi, xi)
    s[output].bind(bf, te.thread_axis("blockIdx.z"))
    s[output].bind(by, te.thread_axis("blockIdx.y"))
    s[output].bind(bx, te.thread_axis("blockIdx.x"))
    s[output].bind(vf, te.thread_axis("vthread"))
    s[output].bind(vy, te.thread_axis("vthread"))
    s[output].bind(vx, te.thread_axis("vthread"))
    s[output].bind(tf, te.thread_axis("threadIdx.z"))
    s[output].bind(ty, te.thread_axis("threadIdx.y"))
    s[output].bind(tx, te.thread_axis("threadIdx.x"))
    s[OL].compute_at(s[output], tx)
    n, f, y, x = s[OL].op.axis
    rc, ry, rx = s[OL].op.reduce_axis
    rco, rcm, rci = split_by_sizes(s[OL], rc, cfg["tile_rc"])
    ryo, rym, ryi = split_by_sizes(s[OL], ry, cfg["tile_ry"])
    rxo, rxm, rxi = split_by_sizes(s[OL], rx, cfg["tile_rx"])
    s[OL].reorder(rco, ryo, rxo, rcm, rym, rxm, rci, ryi, rxi, n, f, y, x)
    s[AA].compute_at(s[OL], rxo)
    s[WW].compute_at(s[OL], rxo)
    s[AL].compute_at(s[OL], rxm)
    s[WL].compute_at(s[OL], rxm)
    for load in [AA, WW]:
        n, f, y, x = s[load].op.axis
        fused = s[load].fuse(n, f, y, x)
        tz, fused = s[load].split(fused, nparts=cfg["tile_f"][2])
        ty, fused = s[load].split(fused, nparts=cfg["tile_y"][2])
        tx, fused = s[load].split(fused, nparts=cfg["tile_x"][2])
        s[load].bind(tz, te.thread_axis("threadIdx.z"))
        s[load].bind(ty, te.thread_axis("threadIdx.y"))
        s[load].bind(tx, te.thread_axis("threadIdx.x"))
    s[output].pragma(kernel_scope, "auto_unroll_max_step", cfg["auto_unroll_max_step"])
    s[output].pragma(kernel_scope, "unroll_explicit", cfg["unroll_explicit"])
    return s, [raw_data, kernel, conv]
