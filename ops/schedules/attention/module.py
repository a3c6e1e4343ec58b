"""The fused attention kernel's module: the form of the kernel its configuration names,
with its host function (:func:`attention_module`)."""

from __future__ import annotations

from ....ir.attrs import FuncAttrs
from ....ir.stmt import Buffer, Launch, Module, PrimFunc
from .kernel import _Kernel
from .knobs import AttentionConfig
from .workload import AttentionWorkload


def attention_module(w: AttentionWorkload, cfg: AttentionConfig,
                     name: str = "attention", copy_offsets: bool | None = None) -> Module:
    """The device IR of the fused kernel for ``w`` with ``cfg``: a host function ``main``
    taking ``q, k, v[, mask], out`` (their n-D shapes) and one kernel. Check ``cfg``
    first (:func:`~.knobs.check_attention_config`). ``cfg.mma`` ``"wgmma"`` builds the
    warpgroup form (:mod:`.kernel_wgmma`; with ``cfg.scores`` ``"registers"``
    :mod:`.kernel_wgmma_regs`, with ``cfg.overlap`` ``"intra"``
    :mod:`.kernel_wgmma_overlap`; with ``cfg.schedule`` ``"pingpong"``
    :mod:`.kernel_wgmma_pingpong`). ``copy_offsets`` (wgmma forms; None: the form's
    default, on for the overlapped form only) addresses each thread's copies of a tile as
    its first one's plus constants (``WgmmaKernel._copy``): the same kernel in fewer
    registers, kept off the forms the calibration timed until a GPU times it."""
    if copy_offsets is not None and cfg.mma != "wgmma":
        raise ValueError("copy_offsets is a choice of the wgmma forms' copies (their "
                         f"128B-swizzled tiles), not of mma={cfg.mma!r}")
    if cfg.schedule == "pingpong":
        from .kernel_wgmma_pingpong import PingPongOverlappedKernel, PingPongRegisterKernel

        kind = PingPongOverlappedKernel if cfg.overlap != "none" else PingPongRegisterKernel
        kb = kind(w, cfg, copy_offsets)
    elif cfg.mma == "wgmma" and cfg.overlap != "none":
        from .kernel_wgmma_overlap import OverlappedKernel

        kb = OverlappedKernel(w, cfg, copy_offsets)
    elif cfg.mma == "wgmma" and cfg.scores == "registers":
        from .kernel_wgmma_regs import RegisterScoresKernel

        kb = RegisterScoresKernel(w, cfg, copy_offsets)
    elif cfg.mma == "wgmma":
        from .kernel_wgmma import WgmmaKernel

        kb = WgmmaKernel(w, cfg, copy_offsets)
    else:
        kb = _Kernel(w, cfg)
    params = [kb.q, kb.k, kb.v] + ([kb.mask] if kb.mask is not None else []) + [kb.out]
    grid = (-(-w.q_len // cfg.block_q), w.heads, w.batch)
    kernel = PrimFunc(f"{name}_kernel0", params, kb.body(),
                      FuncAttrs.kernel(grid, kb.block, stages=("out",),
                                       dynamic_shared_bytes=kb.lay.total
                                       ).replace(**kb.kernel_attrs))
    shapes = w.shapes()
    host_params = [Buffer(p.name, p.dtype, shapes[p.name]) for p in params]
    host = PrimFunc("main", host_params, Launch(kernel.name, host_params), FuncAttrs.host())
    return Module([host, kernel])
