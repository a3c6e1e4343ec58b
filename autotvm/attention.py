"""The AutoTVM template of fused attention.

Importing this module registers ``attention.cuda``::

    import ptxforge.autotvm.attention  # noqa: F401  (registers the template)

    task = autotvm.task.create("attention.cuda",
                               args=(1, 16, 16, 4096, 4096, 128, 128, "float16", True),
                               target="cuda")
    option = autotvm.measure_option(builder=autotvm.LocalBuilder(), runner=...)

Arguments: ``B, Hq, Hkv, L, S, E, Ev, dtype[, causal, scale, mask_shape, mask_dtype]``
(``q [B, Hq, L, E]``, ``k [B, Hkv, S, E]``, ``v [B, Hkv, S, Ev]``, an optional mask of
``mask_shape``). The knobs are those of the kernel's knob space
(:mod:`ptxforge.ops.schedules.attention.knobs`): ``warps`` (16 query rows each),
``block_kv`` and ``stages``; a combination that breaks one of its rules (shared memory,
registers) is rejected at instantiation with an ``InstantiationError`` naming the rule,
and without a record the template takes ``choose_attention_config``'s configuration.

The schedule is one step, ``fused_attention(warps=, block_kv=, stages=, causal=,
scale=)``: the kernel is device IR built whole, which the usual builders
(:class:`~ptxforge.measure.LocalBuilder`; ``AttentionBuilder`` is another name of it) make
for a candidate holding that step in place of the lowering; the runners, records and
``apply_history_best`` are the usual ones.
"""

from __future__ import annotations

from .. import te
from ..measure.build import BuildOptions, LocalBuilder, build_candidate
from ..measure.result import BuildResult, MeasureInput
from ..ops.attention import attention
from ..ops.schedules.attention import (
    AttentionConfig,
    AttentionError,
    AttentionMask,
    AttentionWorkload,
    check_attention_config,
    choose_attention_config,
)
from ..ops.schedules.attention.knobs import BLOCK_KV, MMA_ROWS, MMAS, STAGES, WARPS
from ..ops.schedules.attention.knobs_wgmma import WGMMA_STAGES
from ..ops.schedules.attention.schedule_pass import FusedAttention, fused_attention_step
from ..target import as_target
from .dispatch import get_config
from .task import template

NAME = "attention.cuda"


def attention_declaration(B, Hq, Hkv, L, S, E, Ev, dtype="float16", causal=False,
                          scale=None, mask_shape=None, mask_dtype="bool"):
    """``(tensors, workload)`` of the template: ``[q, k, v, (mask), out]``."""
    q = te.placeholder((B, Hq, L, E), dtype, name="q")
    k = te.placeholder((B, Hkv, S, E), dtype, name="k")
    v = te.placeholder((B, Hkv, S, Ev), dtype, name="v")
    mask = None
    if mask_shape is not None:
        mask = te.placeholder(tuple(mask_shape), mask_dtype, name="mask")
    out = attention(q, k, v, mask, bool(causal), scale)
    m = None if mask is None else AttentionMask(tuple(int(x) for x in mask_shape), mask_dtype)
    w = AttentionWorkload(B, Hq, Hkv, L, S, E, Ev, dtype, bool(causal), scale, m)
    return [q, k, v] + ([mask] if mask is not None else []) + [out], w


@template(NAME)
def attention_template(B, Hq, Hkv, L, S, E, Ev, dtype="float16", causal=False, scale=None,
                       mask_shape=None, mask_dtype="bool"):
    """The fused attention template (see the module doc)."""
    tensors, w = attention_declaration(B, Hq, Hkv, L, S, E, Ev, dtype, causal, scale,
                                       mask_shape, mask_dtype)
    target = as_target(None)
    cfg = get_config()
    rows = -(-L // MMA_ROWS) * MMA_ROWS
    keys = -(-S // MMA_ROWS) * MMA_ROWS
    # warps beyond the query rows and key tiles beyond the keys only pad
    cfg.define_knob("warps", [x for x in WARPS if x == 1 or MMA_ROWS * x <= rows])
    cfg.define_knob("block_kv", [x for x in BLOCK_KV if x == BLOCK_KV[0] or x <= keys])
    # sm_90a: the wgmma form's third stage (the next tile's Q K^T beside the softmax)
    cfg.define_knob("stages", list(WGMMA_STAGES if target.has_wgmma else STAGES))
    if target.has_wgmma:
        # sm_90a: the products on wgmma (warps 4 or 8, block_kv 64 or 128) or mma.sync
        cfg.define_knob("mma", list(MMAS))
    cfg.add_flop(w.flops)
    if cfg.is_fallback:
        ac = choose_attention_config(w, target)
    else:
        mma = cfg["mma"].val if target.has_wgmma else MMAS[0]
        ac = AttentionConfig(cfg["warps"].val, cfg["block_kv"].val, cfg["stages"].val, mma)
        try:
            check_attention_config(w, ac, target)
        except AttentionError as e:
            cfg.raise_error(str(e))
    s = te.create_schedule(tensors[-1].op)
    s.apply(FusedAttention(ac.warps, ac.block_kv, ac.stages, w.causal, w.scale, ac.mma))
    return s, tensors


@attention_template.defaults
def _defaults(B, Hq, Hkv, L, S, E, Ev, dtype="float16", causal=False, scale=None,
              mask_shape=None, mask_dtype="bool"):
    _, w = attention_declaration(B, Hq, Hkv, L, S, E, Ev, dtype, causal, scale, mask_shape,
                                 mask_dtype)
    try:
        return choose_attention_config(w, as_target(None)).to_dict()
    except AttentionError:
        return {}


def template_args(w: AttentionWorkload) -> tuple:
    """The template's arguments for an attention problem, in the one spelling records
    match: ``B, Hq, Hkv, L, S, E, Ev, dtype, causal, scale`` and, with a mask, its shape
    (a tuple) and dtype. Create tasks with them (``autotvm.task.create(NAME,
    template_args(w))``) so that :func:`dispatched_config` finds their records."""
    head = (w.batch, w.heads, w.kv_heads, w.q_len, w.kv_len, w.head_dim, w.v_dim, w.dtype,
            w.causal, w.scale)
    return head if w.mask is None else head + (tuple(w.mask.shape), w.mask.dtype)


def dispatched_config(w: AttentionWorkload) -> AttentionConfig:
    """The configuration the current dispatch context gives ``w`` (inside
    ``apply_history_best(log)``: the best record of ``attention.cuda`` for it; otherwise
    the default chooser's), for the current target."""
    from .dispatch import DEFAULT_TARGET, DispatchContext

    workload = (NAME,) + template_args(w)
    if not DispatchContext.current().query_all(DEFAULT_TARGET, workload):
        # no record: the default, without the template's fallback warning (a graph build
        # of untuned functions says so once, for all of them)
        return choose_attention_config(w, as_target(None))
    sch, _ = attention_template(*template_args(w))
    step = fused_attention_step(sch.pipeline)
    return step.config


def build_attention_candidate(inp: MeasureInput,
                              options: BuildOptions | None = None) -> BuildResult:
    """Build one candidate: :func:`~ptxforge.measure.build.build_candidate`, which builds a
    schedule holding a ``fused_attention`` step as the fused kernel itself (kept for the
    callers written before it did)."""
    return build_candidate(inp, options or BuildOptions())


AttentionBuilder = LocalBuilder
"""The builder of attention candidates: :class:`~ptxforge.measure.LocalBuilder` builds a
``fused_attention`` step as the fused kernel in its worker processes like any other
candidate (the name stays for the callers written before it did)."""
