"""The AutoTVM template of fused attention.

Importing this module registers ``attention.cuda``::

    import ptxforge.autotvm.attention  # noqa: F401  (registers the template)

    task = autotvm.task.create("attention.cuda",
                               args=(1, 16, 16, 4096, 4096, 128, 128, "float16", True),
                               target="cuda")
    option = autotvm.measure_option(builder=autotvm.LocalBuilder(), runner=...)

Arguments: ``B, Hq, Hkv, L, S, E, Ev, dtype[, causal, scale, mask_shape, mask_dtype,
layout, views]`` (``q [B, Hq, L, E]``, ``k [B, Hkv, S, E]``, ``v [B, Hkv, S, Ev]``, an
optional mask of ``mask_shape``; ``layout="bshd"``: ``[B, L, H, E]`` operands, as
``fold_attention_layout`` writes the attention of a transformer; ``views``: for each of q,
k and v, ``()`` or ``(row_stride, offset, base_shape)`` where the kernel reads the operand
out of the rows of a wider tensor, the slices of a combined Q/K/V projection; operands
with one base shape are one tensor, as the graph's combined projection is).
:func:`template_args` writes the arguments of an :class:`AttentionWorkload` in the one
spelling records match, so the records a graph's attention looks up are those of a task
made from its own workload, views included; :func:`extract_tasks` makes the tasks of a
network's fused attentions. The knobs are those of the kernel's knob space
(:mod:`ptxforge.ops.schedules.attention.knobs`): ``warps`` (16 query rows each),
``block_kv`` and ``stages``, and on an sm_90a target ``mma`` (``mma_sync``, ``wgmma``),
``scores`` and ``p_operand`` (``shared``, ``registers``: the wgmma forms with the scores,
and P V's A, in registers), then ``overlap`` (``none``, ``intra``: the softmax under the
products) and ``schedule`` (``cooperative``, ``pingpong``: two warpgroups issuing their
products in turns). Each of these came last when it came, with the old behaviour first,
so a config index of the space before it names the same configuration, and a record
written before it (its entity list without it) applies the old behaviour. A
combination that breaks one of the kernel's rules (shared memory, registers, ``p_operand
="registers"`` without ``scores="registers"``, register scores with mma.sync) is
rejected at instantiation with an ``InstantiationError`` naming the rule, and without a
record the template takes ``choose_attention_config``'s configuration.

The schedule is one step, ``fused_attention(warps=, block_kv=, stages=, causal=,
scale=, mma=, scores=, p_operand=, overlap=, schedule=)``: the kernel is device IR built
whole, which the usual builders
(:class:`~ptxforge.measure.LocalBuilder`; ``AttentionBuilder`` is another name of it) make
for a candidate holding that step in place of the lowering; the runners, records and
``apply_history_best`` are the usual ones.
"""

from __future__ import annotations

from .. import te
from ..measure.build import BuildOptions, LocalBuilder, build_candidate
from ..measure.result import BuildResult, MeasureInput
from ..ops.attention import attention, operand_view
from ..ops.schedules.attention import (
    AttentionConfig,
    AttentionError,
    AttentionMask,
    AttentionWorkload,
    check_attention_config,
    choose_attention_config,
)
from ..ops.schedules.attention.knobs import (
    BLOCK_KV,
    MMA_ROWS,
    MMAS,
    OVERLAPS,
    P_OPERANDS,
    SCHEDULES,
    SCORES,
    STAGES,
    WARPS,
)
from ..ops.schedules.attention.knobs_wgmma import WGMMA_STAGES
from ..ops.schedules.attention.schedule_pass import (
    FusedAttention,
    fused_attention_step,
    views_param,
)
from ..ops.schedules.attention.workload import OperandView
from ..target import as_target
from .dispatch import get_config
from .task import template

NAME = "attention.cuda"


def _view_tuple(view) -> OperandView | None:
    if not view:
        return None
    row_stride, offset, base = view
    return OperandView(int(row_stride), int(offset), tuple(int(x) for x in base))


def attention_declaration(B, Hq, Hkv, L, S, E, Ev, dtype="float16", causal=False,
                          scale=None, mask_shape=None, mask_dtype="bool", layout="bhsd",
                          views=None):
    """``(tensors, workload)`` of the template: ``[q, k, v, (mask), out]``, where an
    operand read through a view is its base tensor (listed once where q, k and v share
    it)."""
    def shape(heads, seq, dim):
        return (B, seq, heads, dim) if layout == "bshd" else (B, heads, seq, dim)

    ops = [("q", shape(Hq, L, E)), ("k", shape(Hkv, S, E)), ("v", shape(Hkv, S, Ev))]
    ov = tuple(_view_tuple(x) for x in views) if views else (None, None, None)
    bases: dict = {}
    operands, inputs = [], []
    for (name, op_shape), view in zip(ops, ov):
        if view is None:
            t = te.placeholder(op_shape, dtype, name=name)
            inputs.append(t)
            operands.append(t)
            continue
        base = bases.get(view.base_shape)
        if base is None:
            base = te.placeholder(view.base_shape, dtype, name="qkv" if len(bases) == 0
                                  else f"qkv{len(bases)}")
            bases[view.base_shape] = base
            inputs.append(base)
        operands.append(operand_view(base, op_shape, view.offset, name))
    mask = None
    if mask_shape is not None:
        mask = te.placeholder(tuple(mask_shape), mask_dtype, name="mask")
    out = attention(*operands, mask, bool(causal), scale, layout)
    m = None if mask is None else AttentionMask(tuple(int(x) for x in mask_shape), mask_dtype)
    w = AttentionWorkload(B, Hq, Hkv, L, S, E, Ev, dtype, bool(causal), scale, m, layout,
                          ov if any(ov) else None)
    return inputs + ([mask] if mask is not None else []) + [out], w


@template(NAME)
def attention_template(B, Hq, Hkv, L, S, E, Ev, dtype="float16", causal=False, scale=None,
                       mask_shape=None, mask_dtype="bool", layout="bhsd", views=None):
    """The fused attention template (see the module doc)."""
    tensors, w = attention_declaration(B, Hq, Hkv, L, S, E, Ev, dtype, causal, scale,
                                       mask_shape, mask_dtype, layout, views)
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
        # the wgmma forms with the scores (and P V's A) in registers. Defined last, each
        # with "shared" first: a config index of the space before them (the first knob
        # varies fastest) names the same configuration, with both "shared"
        cfg.define_knob("scores", list(SCORES))
        cfg.define_knob("p_operand", list(P_OPERANDS))
        # the overlapped and ping-pong register forms, last for the same reason
        cfg.define_knob("overlap", list(OVERLAPS))
        cfg.define_knob("schedule", list(SCHEDULES))
    cfg.add_flop(w.flops)
    if cfg.is_fallback:
        ac = choose_attention_config(w, target)
    else:
        ac = _config_of(cfg, target.has_wgmma)
        try:
            check_attention_config(w, ac, target)
        except AttentionError as e:
            cfg.raise_error(str(e))
    s = te.create_schedule(tensors[-1].op)
    s.apply(FusedAttention(ac.warps, ac.block_kv, ac.stages, w.causal, w.scale, ac.mma,
                           w.layout, views_param(w), scores=ac.scores,
                           p_operand=ac.p_operand, overlap=ac.overlap,
                           schedule=ac.schedule))
    return s, tensors


def _config_of(cfg, wgmma: bool) -> AttentionConfig:
    """The kernel configuration of a config entity. A knob the entity lacks takes its first
    candidate: a record written before the ``scores`` / ``p_operand`` knobs existed holds
    neither and meant the shared form, one before ``overlap`` / ``schedule`` the plain,
    cooperative one."""
    def knob(name: str, first: str) -> str:
        return cfg[name].val if wgmma and name in cfg else first

    return AttentionConfig(cfg["warps"].val, cfg["block_kv"].val, cfg["stages"].val,
                           knob("mma", MMAS[0]), knob("scores", SCORES[0]),
                           knob("p_operand", P_OPERANDS[0]), knob("overlap", OVERLAPS[0]),
                           knob("schedule", SCHEDULES[0]))


@attention_template.defaults
def _defaults(B, Hq, Hkv, L, S, E, Ev, dtype="float16", causal=False, scale=None,
              mask_shape=None, mask_dtype="bool", layout="bhsd", views=None):
    _, w = attention_declaration(B, Hq, Hkv, L, S, E, Ev, dtype, causal, scale, mask_shape,
                                 mask_dtype, layout, views)
    target = as_target(None)
    try:
        ac = choose_attention_config(w, target)
    except AttentionError:
        return {}
    out = {"warps": ac.warps, "block_kv": ac.block_kv, "stages": ac.stages}
    if target.has_wgmma:
        # every knob of the space, the shared defaults included (to_dict leaves them out)
        out.update(mma=ac.mma, scores=ac.scores, p_operand=ac.p_operand,
                   overlap=ac.overlap, schedule=ac.schedule)
    return out


def template_args(w: AttentionWorkload) -> tuple:
    """The template's arguments for an attention problem, in the one spelling records
    match: ``B, Hq, Hkv, L, S, E, Ev, dtype, causal, scale``; with a mask, its shape (a
    tuple) and dtype; with another layout than ``bhsd`` or views, the mask's two (None,
    "bool" without one), the layout and the views (each ``()`` or ``(row_stride, offset,
    base_shape)``). Create tasks with them (``autotvm.task.create(NAME,
    template_args(w))``) so that :func:`dispatched_config` finds their records: the
    problem of an attention of a graph build (``fold_attention_layout``'s ``bshd`` layout
    and views included) is a task of its own, whose records apply to it alone."""
    head = (w.batch, w.heads, w.kv_heads, w.q_len, w.kv_len, w.head_dim, w.v_dim, w.dtype,
            w.causal, w.scale)
    mask = (None, "bool") if w.mask is None else (tuple(w.mask.shape), w.mask.dtype)
    if w.layout == "bhsd" and not w.views:
        return head if w.mask is None else head + mask
    views = tuple((v.row_stride, v.offset, tuple(v.base_shape)) if v is not None else ()
                  for v in (w.views or (None, None, None)))
    return head + mask + (w.layout, views if any(views) else None)


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


def extract_tasks(net, params: dict | None = None, target="cuda", **options) -> list:
    """The tasks of this template for the fused attentions of a network, one per distinct
    problem, each made from the attention's own workload (:func:`template_args`: its
    layout and views included), so that the records of tuning them are those
    ``graph.build`` of the network looks up. ``options``: those of the build that will use
    the records (``precision``, ``layout``, ``pad_channels``); which attentions stay whole
    is the graph pass config's ``fused_attention`` (``graph.passes.GraphPassContext(
    config={"fused_attention": True})`` around the call and the build)::

        with GraphPassContext(config={"fused_attention": True}):
            tasks = attention.extract_tasks(net, params, precision="float16")
            ...  # tune each task, logging to log
            with autotvm.apply_history_best(log):
                lib = graph.build(net, "cuda", params, precision="float16")
    """
    from ..network_reader import read_network
    from ..ops.attention import TAG, attention_inputs, attention_workload
    from .task import create

    tasks, seen = [], set()
    for func in read_network(net, params, **options):
        tensors = getattr(func, "tensors", None) or func.build_tensors()
        out = tensors[-1]
        if getattr(out.op, "tag", "") != TAG:
            continue
        if {id(t) for t in attention_inputs(out)} != {id(t) for t in tensors[:-1]}:
            continue  # something else fused into the function: no fused kernel runs it
        args = template_args(attention_workload(out))
        if args not in seen:
            seen.add(args)
            tasks.append(create(NAME, args=args, target=target))
    return tasks


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
