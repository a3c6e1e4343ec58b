"""The tiled GPU schedule of the reductions with data reuse: conv2d (NCHW, NHWC),
depthwise conv2d, dense / matmul and batch_matmul.

The structure is that of TVM's GPU templates and the seed tutorial's schedule:

* the output stage (the element-wise epilogue when there is one, else the copy stage of a
  local ``cache_write``) is split per axis into block / thread / inner loops; the block
  loops are fused onto ``blockIdx.x``, the thread loops onto ``threadIdx.x``;
* the reduction is computed at the thread loop into a local accumulator of
  ``prod(inner)`` elements, its longest reduce axis cut into chunks;
* at every chunk each input whose elements the threads of a block share is copied into
  shared memory by all of them (a cooperative fetch; an inlined producer such as the
  padding is computed during the copy); an input each thread reads alone (the weights of
  a matrix-vector product) is read from global memory where it is used;
* the per-chunk loops are unrolled (``auto_unroll_max_step``) so that LLVM sees straight
  FMA code with constant shared-memory offsets;
* a shared buffer read row-wise by different threads with a long reduction-contiguous
  row gets its row stride padded (``storage_align``) so that the threads' vector loads
  fall in different banks.

Tile sizes come from :func:`~ptxforge.ops.schedules.tiling.choose_tiling`.
"""

from __future__ import annotations

from ...ir import te
from ...ir.te import ComputeOp
from ...passes.schedule.schedule import Schedule
from ...target import Target
from .analysis import input_accesses
from .common import fuse_bind, output_stage, split_levels
from .tiling import MAX_UNROLLED_STEPS, Tiling, choose_tiling, input_tensors


def schedule_tiled(s: Schedule, op: ComputeOp, epilogue: ComputeOp | None = None,
                   target: Target | str | None = None, tiling: Tiling | None = None) -> Tiling:
    """Schedule reduction ``op`` (and its fused element-wise ``epilogue``) as a tiled
    kernel; returns the tiling used (``tiling`` overrides the chooser)."""
    accesses = input_accesses(op)
    tiling = tiling or choose_tiling(op, target, accesses)
    out, acc = output_stage(s, op, epilogue)

    # block / thread / inner loops of the output stage
    levels = [split_levels(out, ax, (t, i))
              for ax, t, i in zip(out.op.axis, tiling.threads, tiling.inner)]
    blocks = [lv[0] for lv in levels]
    threads = [lv[1] for lv in levels]
    inner = [lv[2] for lv in levels]
    order = [x for x in blocks + threads + inner if x is not None]
    if order:
        out.reorder(*order)
    block_loop = fuse_bind(out, blocks, "blockIdx.x")
    thread_loop = fuse_bind(out, threads, "threadIdx.x")
    attach = thread_loop or block_loop
    for x in inner:
        if x is not None:
            out.unroll(x)

    # the reduction per thread, its chunked axis outermost
    if attach is not None:
        acc.compute_at(out, attach)
    reduce_axes = list(acc.op.reduce_axis)
    chunk_outer, chunk_inner = acc.split(reduce_axes[tiling.chunk_axis], factor=tiling.chunk)
    inner_reduce = [chunk_inner if k == tiling.chunk_axis else ax
                    for k, ax in enumerate(reduce_axes)]
    acc.reorder(chunk_outer, *inner_reduce, *acc.op.axis)
    # the accumulators stay in registers only if every loop indexing them is unrolled,
    # the initialization's copy of these loops included
    for ax, i in zip(acc.op.axis, tiling.inner):
        if i > 1:
            acc.unroll(ax)

    # cooperative fetches of every input into shared memory, once per chunk
    nthreads = tiling.num_threads
    staged = tiling.staged or (True,) * len(input_tensors(accesses))
    for tensor, stage_it in zip(input_tensors(accesses), staged):
        if not stage_it or not tensor.shape:
            continue  # a scalar input stays where it is: every thread reads the same value
        a = next(x for x in accesses if x.tensor is tensor)
        cached = s.cache_read(tensor, "shared", [acc])
        cs = s[cached]
        cs.compute_at(acc, chunk_outer)
        fused = cs.fuse(*cs.op.axis) if len(cs.op.axis) > 1 else cs.op.axis[0]
        _, tx = cs.split(fused, factor=nthreads)
        cs.bind(tx, te.thread_axis("threadIdx.x"))
        _align_rows(cs, a, tiling, op)
    acc.pragma(chunk_outer, "auto_unroll_max_step", MAX_UNROLLED_STEPS)
    return tiling


def _align_rows(cs, access, tiling: Tiling, op: ComputeOp) -> None:
    """Pad the row stride of a shared copy whose rows are read along the reduction
    (consecutive steps, consecutive elements) and differ between threads: rows of 16 or
    more elements would otherwise put the threads' loads in the same banks."""
    if not access.contiguous_in_reduce or len(access.dims) < 2:
        return
    reduce_var = op.reduce_axis[tiling.chunk_axis].var
    last = access.dims[-1]
    if reduce_var not in last.coeffs or tiling.chunk < 16:
        return
    row = access.dims[-2]
    spatial = {a.var: t for a, t in zip(op.axis, tiling.threads)}
    if not any(spatial.get(v, 1) > 1 for v in row.coeffs):
        return
    # stride = 4 (mod 16): eight threads' 16-byte loads cover all 32 banks once
    cs.storage_align(len(access.dims) - 2, 16, 4)
