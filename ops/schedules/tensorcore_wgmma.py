"""A wgmma (sm_90a) schedule for dense / GEMM: ``C[M, N] = A[M, K] x B[N, K]^T``, fp16 or
bf16 inputs, float32 accumulation, an optional cast of the output to fp16 / bf16.

Every block computes a ``64 * warpgroups x block_n`` tile; warpgroup ``w`` (threadIdx.y,
128 threads on threadIdx.x) owns rows ``64 w .. 64 w + 63`` in one ``warpgroup``
accumulator of ``64 x block_n`` f32 (``block_n / 2`` registers per thread). K runs in
steps of 64 (rows of 128 bytes): the A and B tiles of a step are copied by every thread
with 16-byte cp.async into shared buffers swizzled with 3 bits (the wgmma 128B layout),
software-pipelined over ``stages`` buffers; each step is four ``wgmma m64n{block_n}k16``
reading both tiles straight from shared memory through descriptors. The protocol
(``fence.proxy.async``, ``wgmma.fence``, commit, wait) is placed by the lowering pass
``inject_wgmma_sync``; ``in_flight=1`` keeps one group running across K steps (the
``wgmma_in_flight`` pragma), with the copies then fetched ``stages - 2`` tiles ahead.
The accumulators are stored to global memory thread by thread (``store_wg_*``, casting
on the way). Only the schedule primitives are used: cache_read/cache_write, split,
reorder, bind, compute_at, fuse, vectorize, swizzle, async_copy, pipeline, pragma and
tensorize.
"""

from __future__ import annotations

from dataclasses import dataclass

from ... import te
from ...ir.intrin.wgmma import WARPGROUP, require_wgmma
from ...passes.schedule.common import ScheduleError
from .tensorcore import SUFFIX, _b_is_kn, _is_cast

BLOCK_K = 64
"""K step of a shared tile: 64 fp16/bf16 elements, one 128-byte row of the 128B swizzle."""
BLOCK_N = (64, 128, 256)
"""The block tile widths offered (one ``m64n{block_n}k16`` per k16 step)."""


@dataclass(frozen=True)
class WgmmaScheduleConfig:
    """Knobs of :func:`schedule_dense_wgmma`.

    ``block_n``: 64, 128 or 256 output columns per block (the wgmma's N);
    ``warpgroups``: 1 or 2 (the block tile has ``64 * warpgroups`` rows);
    ``stages``: 1 to 5 shared buffers per operand (1: no software pipeline);
    ``in_flight``: 0 or 1 wgmma groups left running across K steps (1 needs 3 stages or
    more: the copies then run ``stages - 2`` tiles ahead, so none overwrites a tile the
    running group reads).
    """

    block_n: int = 128
    warpgroups: int = 2
    stages: int = 4
    in_flight: int = 0

    @property
    def block_m(self) -> int:
        return 64 * self.warpgroups

    def check(self, M: int, N: int, K: int, target=None) -> None:
        from ...target import as_target

        optin = as_target(target).max_shared_memory_per_block_optin
        smem = wgmma_shared_bytes(self)
        rules = [
            (self.block_n in BLOCK_N, f"block_n in {BLOCK_N} (got {self.block_n})"),
            (self.warpgroups in (1, 2), f"warpgroups 1 or 2 (got {self.warpgroups})"),
            (isinstance(self.stages, int) and 1 <= self.stages <= 5,
             f"stages 1 to 5 (got {self.stages})"),
            (self.in_flight in (0, 1), f"in_flight 0 or 1 (got {self.in_flight})"),
            (self.in_flight == 0 or self.stages >= 3,
             f"3 stages or more for in_flight=1 (got {self.stages}: the copies run "
             "stages - 2 tiles ahead)"),
            (M % self.block_m == 0, f"64 * warpgroups = {self.block_m} to divide M {M}"),
            (N % self.block_n == 0, f"block_n {self.block_n} to divide N {N}"),
            (K % BLOCK_K == 0, f"K {K} to be a multiple of {BLOCK_K} (128-byte rows)"),
            (smem <= optin, f"at most {optin} bytes of shared memory per block ({self.stages} "
                            f"stages of {self.block_m}x{BLOCK_K} and {self.block_n}x{BLOCK_K} "
                            f"tiles take {smem})"),
        ]
        for ok, rule in rules:
            if not ok:
                raise ScheduleError(f"wgmma dense {M}x{N}x{K} with {self}: need {rule}")


def wgmma_shared_bytes(cfg: WgmmaScheduleConfig) -> int:
    """Shared memory of the schedule: ``stages`` A and B tiles of 64 16-bit columns."""
    return cfg.stages * (cfg.block_m + cfg.block_n) * BLOCK_K * 2


def schedule_dense_wgmma(tensors, cfg: WgmmaScheduleConfig | None = None,
                         target="cuda -arch=sm_90a"):
    """The wgmma schedule of ``tensors`` (``[A, B, out]`` from
    :func:`~.tensorcore.dense_tensorcore_compute` with ``b_layout="nk"``) for ``target``,
    which must have wgmma (sm_90a; the simulator as ``"sim -arch=sm_90a"``)."""
    cfg = cfg or WgmmaScheduleConfig()
    require_wgmma(target)
    a, b, out = tensors
    M, K = a.shape
    N = out.shape[1]
    c = out if not _is_cast(out) else out.op.input_tensors[0]
    ab = a.dtype
    if ab not in ("float16", "bfloat16") or b.dtype != ab:
        raise ScheduleError(f"wgmma dense takes float16 or bfloat16 inputs, not {ab} x "
                            f"{b.dtype} (TF32 runs on the mma.sync schedule)")
    if c.dtype != "float32":
        raise ScheduleError(f"wgmma dense accumulates in float32, not {c.dtype}")
    if out.dtype not in ("float32", "float16", "bfloat16"):
        raise ScheduleError(f"wgmma dense writes float32, float16 or bfloat16, not {out.dtype}")
    if _b_is_kn(c, b):
        raise ScheduleError("wgmma dense takes B as [N, K] (K-major operands)")
    cfg.check(M, N, K, target)
    s = te.create_schedule(out.op)
    cf = s.cache_write(c, "warpgroup")
    if out is not c:
        s[c].compute_inline()
    a_sh = s.cache_read(a, "shared", [cf])
    b_sh = s.cache_read(b, "shared", [cf])

    # the output: blocks, warpgroups, 64x8 accumulator tiles stored thread by thread
    o = s[out]
    i, j = o.op.axis
    bi, i = o.split(i, factor=cfg.block_m)
    bj, j = o.split(j, factor=cfg.block_n)
    wg, i = o.split(i, factor=64)
    tj, jj = o.split(j, factor=8)
    o.reorder(bi, bj, wg, tj, i, jj)
    o.bind(bi, "blockIdx.y")
    o.bind(bj, "blockIdx.x")
    o.bind(wg, "threadIdx.y")
    store = "store_wg_f32" + ("" if out.dtype == "float32" else f"_{SUFFIX[out.dtype]}")
    o.tensorize(i, store)
    o.unroll(tj)

    # the accumulators of one warpgroup; K in steps of 64, each four k16 wgmmas
    s[cf].compute_at(o, wg)
    f = s[cf]
    ci, cj = f.op.axis
    (kr,) = f.op.reduce_axis
    ko, ki = f.split(kr, factor=BLOCK_K)
    ki, kk = f.split(ki, factor=16)
    f.reorder(ko, ki, ci, cj, kk)

    # shared tiles: 16-byte cp.async by every thread, into the 128B-swizzled layout
    for sh in (a_sh, b_sh):
        s[sh].compute_at(f, ko)
        st = s[sh]
        r, col = st.op.axis
        fused = st.fuse(r, col)
        fused, v = st.split(fused, factor=8)
        fused, tx = st.split(fused, factor=WARPGROUP)
        fused, ty = st.split(fused, factor=cfg.warpgroups)
        st.bind(tx, "threadIdx.x")
        st.bind(ty, "threadIdx.y")
        st.vectorize(v)
        st.swizzle(3)
        st.async_copy()
    f.tensorize(ci, f"wgmma_m64n{cfg.block_n}k16_{SUFFIX[ab]}_f32")
    f.unroll(ki)
    if cfg.stages > 1:
        f.pipeline(ko, cfg.stages)
    if cfg.in_flight:
        f.pragma(ko, "wgmma_in_flight", cfg.in_flight)
    return s
