"""Dense GEMM on sm_90a with wgmma: ``C[M, N] (float32) = A[M, K] x B[N, K]^T``, fp16 or
bf16 inputs.

This is a fixed kernel template (``backend_ptx/wgmma.py``) outside te: the loop nest is
written by the code generator, so the simulator checks its pieces (the layouts,
descriptors and protocol, ``tests/test_wgmma.py``) rather than running the kernel itself.
The same GEMM as a te schedule (tensorized wgmma, run whole by the simulator) is
:func:`~.tensorcore_wgmma.schedule_dense_wgmma`. :class:`WgmmaConfig` holds the knobs;
:func:`compile_wgmma_dense` checks target, dtypes and shapes and returns the PTX and its
launch.
"""

from __future__ import annotations

from dataclasses import dataclass

from ...backend_ptx.wgmma import GEMM_THREADS, gemm_kernel_ptx, gemm_shared_bytes
from ...ir.intrin.wgmma import WgmmaError, require_wgmma


@dataclass(frozen=True)
class WgmmaConfig:
    """``block_n``: 128 or 256 (block tile 128 x block_n, K step 64); ``stages``: shared
    buffers (2-5); ``in_flight``: wgmma groups left running across a K step (0 or 1)."""

    block_n: int = 256
    stages: int = 4
    in_flight: int = 1


@dataclass(frozen=True)
class WgmmaKernel:
    """A compiled wgmma GEMM: PTX for sm_90a and how to launch it (params A, B, C)."""

    name: str
    ptx: str
    grid: tuple
    block: tuple
    dynamic_shared_bytes: int


def compile_wgmma_dense(M: int, N: int, K: int, in_dtype: str = "float16",
                        config: WgmmaConfig | None = None, target="cuda -arch=sm_90a",
                        out_dtype: str = "float32", name: str = "wgmma_gemm") -> WgmmaKernel:
    """The wgmma GEMM kernel for these sizes, or an error naming what does not fit."""
    cfg = config or WgmmaConfig()
    require_wgmma(target)
    if in_dtype not in ("float16", "bfloat16"):
        raise WgmmaError(f"wgmma dense takes float16 or bfloat16 inputs, not {in_dtype} "
                         "(TF32 runs on the mma.sync schedule)")
    if out_dtype != "float32":
        raise WgmmaError(f"wgmma dense writes float32 C; out_dtype {out_dtype} is not "
                         "supported yet (cast afterwards)")
    ptx = gemm_kernel_ptx(M, N, K, in_dtype, cfg.block_n, cfg.stages, target, name,
                          cfg.in_flight)
    return WgmmaKernel(name, ptx, (N // cfg.block_n, M // 128, 1), (GEMM_THREADS, 1, 1),
                       gemm_shared_bytes(cfg.block_n, cfg.stages))
