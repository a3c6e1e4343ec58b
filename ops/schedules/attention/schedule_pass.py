"""``fused_attention``: the schedule step that picks the fused attention kernel.

Pipeline text such as ``fused_attention(warps=4, block_kv=64, stages=2, causal=True)`` is
how a tuning record stores a configuration of the fused kernel. The kernel is device IR
built whole (:mod:`.kernel`), not a rewrite of the te stages, so the pass leaves the
module it is applied to as it is, after checking that it is the tensor IR of an
``ops.attention`` (parameters ``q, k, v[, mask], out`` of matching shapes) and that the
configuration is one of the knob space; :func:`fused_attention_device_module` reads the
problem from that module and the knobs from the pass and builds the kernel. The
builders (:func:`~ptxforge.measure.build.build_candidate`) do that for
every candidate of the AutoTVM template and the auto-scheduler's attention sketch.
"""

from __future__ import annotations

from dataclasses import dataclass

from ....ir.stmt import Module
from ....passes import Pass, register_pass
from ....passes.errors import PassError
from .knobs import (
    BLOCK_KV,
    MMAS,
    OVERLAPS,
    P_OPERANDS,
    SCHEDULES,
    SCORES,
    STAGES,
    WARPS,
    AttentionConfig,
    check_attention_config,
)
from .knobs_wgmma import WGMMA_STAGES
from .module import attention_module
from .workload import LAYOUTS, AttentionError, AttentionMask, AttentionWorkload

PARAMS = ("q", "k", "v")


def _roles(module: Module) -> list:
    """The parameters of the attention ``module`` as ``[q, k, v, (mask,) out]``: by the
    names the AutoTVM template gives them (``q``, ``k``, ``v``, ``mask``; a schedule's
    function orders its parameters as it finds them), else in that order."""
    params = list(module.main.params)
    if len(params) not in (4, 5):
        raise AttentionError(f"fused_attention: the function takes {len(params)} buffers; "
                             "an attention takes q, k, v, an optional mask and the output")
    by_name = {p.name: p for p in params}
    if not all(n in by_name for n in PARAMS):
        return _roles_from_stages(module, params)
    named = [by_name[n] for n in PARAMS] + ([by_name["mask"]] if len(params) == 5 else [])
    rest = [p for p in params if p not in named]
    if len(rest) != 1 or (len(params) == 5 and "mask" not in by_name):
        raise AttentionError(f"fused_attention: cannot tell the mask and the output apart "
                             f"among {[p.name for p in params]}")
    return named + rest


def _roles_from_stages(module: Module, params: list) -> list:
    """``[q, k, v, (mask,) out]`` read from the attention's stages: the scores' product
    loads q then k, the score stage the mask, the values' product v (a fused function
    orders its parameters as the graph gives them: a network's mask often comes first).
    Falls back to the parameters' order where the stages are not found."""
    from ....ir.expr import Load, children
    from ....ir.stmt import Block, stmt_exprs, walk
    from ...attention import STAGES

    ids = {id(p): p for p in params}
    loads: dict[str, list] = {}

    def in_order(e, found: list) -> None:  # operands left to right: q before k
        if isinstance(e, Load) and id(e.buffer) in ids and ids[id(e.buffer)] not in found:
            found.append(ids[id(e.buffer)])
        for c in children(e):
            in_order(c, found)

    for st in walk(module.main.body):
        if isinstance(st, Block) and st.name in (STAGES[0], STAGES[1], STAGES[5]):
            found = loads.setdefault(st.name, [])
            for inner in walk(st.body):
                for e in stmt_exprs(inner):
                    in_order(e, found)
    qk, score, pv = (loads.get(n, []) for n in (STAGES[0], STAGES[1], STAGES[5]))
    if len(qk) != 2 or len(pv) != 1:
        return params
    mask = [b for b in score if b not in qk]
    roles = qk + pv + mask[:1]
    rest = [p for p in params if p not in roles]
    if len(rest) != 1 or len(roles) + 1 != len(params):
        return params
    return roles + rest


VIEW_INTS = 5
"""Integers per operand in ``FusedAttention.views``: batch, seq, heads, dim, offset."""


def _roles_viewed(module: Module, views: tuple) -> list:
    """``[q, k, v, (mask,) out]`` of a module whose operands are (some of them) views
    (:func:`~ptxforge.ops.attention.operand_view`) of its parameters, read from the
    stages: a viewed operand's base is the parameter its view stage loads, the others
    those the products load; q, k and v may be one parameter."""
    from ....ir.expr import Load, children
    from ....ir.stmt import Block, stmt_exprs, walk
    from ...attention import STAGES

    params = list(module.main.params)
    ids = {id(p): p for p in params}
    loads: dict[str, list] = {}

    def in_order(e, found: list) -> None:
        if isinstance(e, Load) and id(e.buffer) in ids and ids[id(e.buffer)] not in found:
            found.append(ids[id(e.buffer)])
        for c in children(e):
            in_order(c, found)

    for st in walk(module.main.body):
        if isinstance(st, Block):
            found = loads.setdefault(st.name, [])
            for inner in walk(st.body):
                for e in stmt_exprs(inner):
                    in_order(e, found)
    direct = loads.get(STAGES[0], []) + loads.get(STAGES[5], [])
    roles = []
    for which, name in enumerate("qkv"):
        base = loads.get(f"T_attention_{name}_view", [])
        if views[which] is not None:
            if len(base) != 1:
                raise AttentionError(f"fused_attention: the view of {name} (stage "
                                     f"T_attention_{name}_view) is not found in the module")
            roles.append(base[0])
        else:
            if not direct:
                raise AttentionError(f"fused_attention: cannot find {name} among the "
                                     f"parameters {[p.name for p in params]}")
            roles.append(direct.pop(0))
    operands = {id(p) for p in roles}
    mask = [p for p in loads.get(STAGES[1], []) if id(p) not in operands]
    roles += mask[:1]
    rest = [p for p in params if id(p) not in {id(r) for r in roles}]
    if len(rest) != 1:
        raise AttentionError(f"fused_attention: cannot tell the output among the "
                             f"parameters {[p.name for p in params]}")
    return roles + rest


def operand_views(views) -> tuple | None:
    """``FusedAttention.views`` (``VIEW_INTS`` integers per operand, batch 0 for one
    without a view) as ``((batch, seq, heads, dim, offset) or None, ...)`` for q, k, v."""
    if not views:
        return None
    views = tuple(int(x) for x in views)
    if len(views) != 3 * VIEW_INTS:
        raise AttentionError(f"fused_attention: views takes {3 * VIEW_INTS} integers "
                             f"(batch, seq, heads, dim, offset for each of q, k, v; batch 0 "
                             f"for an operand without a view), got {len(views)}")
    out = tuple(views[i:i + VIEW_INTS] if views[i] else None
                for i in range(0, 3 * VIEW_INTS, VIEW_INTS))
    return out if any(out) else None


def views_param(w: AttentionWorkload) -> tuple:
    """``FusedAttention.views`` of the workload ``w`` (empty where it has no views)."""
    if w.views is None:
        return ()
    dims = ((w.q_len, w.heads, w.head_dim), (w.kv_len, w.kv_heads, w.head_dim),
            (w.kv_len, w.kv_heads, w.v_dim))
    out: list = []
    for view, (seq, heads, dim) in zip(w.views, dims):
        out += [w.batch, seq, heads, dim, view.offset] if view is not None else [0] * 5
    return tuple(out)


def workload_of_module(module: Module, causal: bool, scale: float | None,
                       layout: str = "bhsd", views=()) -> AttentionWorkload:
    """The attention problem whose tensor IR (from ``to_ir`` of an ``ops.attention``
    output) ``module`` holds (its parameters as :func:`_roles` reads them, in
    ``layout``: the shapes alone do not tell ``[B, H, L, E]`` from ``[B, L, H, E]``;
    ``views`` as :func:`operand_views` reads them: the operands read out of wider
    parameters)."""
    from .workload import OperandView, check_workload

    viewed = operand_views(views)
    params = _roles(module) if viewed is None else _roles_viewed(module, viewed)
    out = params[-1]
    if viewed is not None:
        # the operands' shapes from the views, their bases as the kernel reads them
        kernel_views = tuple(None if vw is None else OperandView(p.shape[-1], vw[4],
                                                                 tuple(p.shape))
                             for p, vw in zip(params[:3], viewed))
        shapes = [p.shape if vw is None else vw[:4] for p, vw in zip(params[:3], viewed)]
        q, k, v = (_Shape(sh, params[0].dtype, p.name) for sh, p in zip(shapes, params))
    else:
        kernel_views = None
        q, k, v = params[:3]
    for b in (q, k, v, out):
        if b.ndim != 4:
            raise AttentionError(f"fused_attention: {b.name} is {list(b.shape)}, not 4-D "
                                 "[batch, heads, seq, dim]")
    if layout not in LAYOUTS:
        raise AttentionError(f"fused_attention: layout must be one of {LAYOUTS}, got "
                             f"{layout!r}")
    bq, hq, lq, e = q.shape
    hk, s = k.shape[1], k.shape[2]
    if layout == "bshd":
        hq, lq, hk, s = lq, hq, s, hk
    mask = None
    if len(params) == 5:
        mask = AttentionMask(tuple(params[3].shape), params[3].dtype)
    w = AttentionWorkload(bq, hq, hk, lq, s, e, v.shape[3], q.dtype, causal, scale, mask,
                          layout, kernel_views)
    if kernel_views is not None:
        check_workload(w)  # the views against the parameters they read
    if tuple(out.shape) != w.shapes()["out"] or out.dtype != q.dtype:
        raise AttentionError(f"fused_attention: the output {out.name} is {out.dtype} "
                             f"{list(out.shape)}; attention of q {list(q.shape)} and v "
                             f"{list(v.shape)} gives {q.dtype} {list(w.shapes()['out'])}")
    return w


@dataclass(frozen=True)
class _Shape:
    """A viewed operand's shape and dtype, as a parameter's (``workload_of_module``)."""

    shape: tuple
    dtype: str
    name: str

    @property
    def ndim(self) -> int:
        return len(self.shape)


@register_pass
@dataclass(frozen=True)
class FusedAttention(Pass):
    """Run an ``ops.attention`` as the fused tensor-core kernel with this configuration.

    Parameters:
        warps: warps per block; each owns 16 query rows.
        block_kv: keys per tile of the loop over keys (16, 32, 64 or 128).
        stages: 1 (copy, then compute) or 2 (the next tile's copies overlap this one); 3
            with wgmma (the next tile's Q K^T overlaps this tile's softmax).
        causal: the attention's causal mask (top-left aligned).
        scale: the attention's score scale; None is ``1 / sqrt(head dim)``.
        mma: the products' instructions, ``"mma_sync"`` or ``"wgmma"`` (sm_90a: warps 4
            or 8, one warpgroup per 64 query rows; block_kv 64 or 128).
        layout: how q, k, v and the output lie: ``"bhsd"`` ``[B, H, L, E]`` or ``"bshd"``
            ``[B, L, H, E]`` (the attention's ``layout``).
        scores: with wgmma, where the scores live between the products: ``"shared"``
            (a float32 tile) or ``"registers"`` (the accumulator's registers; 1 or 2
            stages).
        p_operand: with scores in registers, where P V's A comes from: ``"shared"`` or
            ``"registers"`` (wgmma with A from registers).
        overlap: with P in registers, ``"intra"`` runs the previous tile's P V and the
            next tile's Q K^T beside the softmax (two score accumulators; 2 stages), or
            ``"none"``.
        schedule: with scores in registers and 8 warps, ``"pingpong"`` makes the two
            warpgroups issue their products in turns (named barriers), or
            ``"cooperative"``.
        views: empty, or for each of q, k, v the 5 integers batch, seq, heads, dim,
            offset of its view into a wider parameter (batch 0: none; ``bshd`` only;
            the slices of a combined Q/K/V projection, see ``fold_attention_layout``).
    """

    name = "fused_attention"
    warps: int = 4
    block_kv: int = 64
    stages: int = 2
    causal: bool = False
    scale: float | None = None
    mma: str = "mma_sync"
    layout: str = "bhsd"
    views: tuple[int, ...] = ()
    scores: str = "shared"
    p_operand: str = "shared"
    overlap: str = "none"
    schedule: str = "cooperative"

    @property
    def config(self) -> AttentionConfig:
        return AttentionConfig(self.warps, self.block_kv, self.stages, self.mma, self.scores,
                               self.p_operand, self.overlap, self.schedule)

    def apply(self, module: Module, ctx) -> Module:
        stages = WGMMA_STAGES if self.mma == "wgmma" else STAGES
        for what, value, allowed in (("warps", self.warps, WARPS),
                                     ("block_kv", self.block_kv, BLOCK_KV),
                                     ("stages", self.stages, stages),
                                     ("mma", self.mma, MMAS),
                                     ("scores", self.scores, SCORES),
                                     ("p_operand", self.p_operand, P_OPERANDS),
                                     ("overlap", self.overlap, OVERLAPS),
                                     ("schedule", self.schedule, SCHEDULES)):
            if value not in allowed:
                raise PassError(self, AttentionError(
                    f"fused_attention: {what} must be one of {allowed}, got {value}"))
        try:
            workload_of_module(module, self.causal, self.scale, self.layout, self.views)
        except AttentionError as e:
            raise PassError(self, e, module) from e
        return module


def fused_attention_step(pipeline) -> FusedAttention | None:
    """The ``fused_attention`` step of a schedule pipeline, if it has one."""
    steps = [p for p in pipeline if isinstance(p, FusedAttention)]
    return steps[-1] if steps else None


def fused_attention_device_module(module: Module, step: FusedAttention, target) -> Module:
    """The device IR of the fused kernel for the attention ``module`` (tensor IR) with the
    configuration of ``step``; the host function's parameters keep the module's names.
    Raises :class:`AttentionError` where ``target`` cannot run the configuration."""
    from ....ir.stmt import Buffer, Launch
    from ....target import as_target

    w = workload_of_module(module, step.causal, step.scale, step.layout, step.views)
    t = as_target(target)
    # the simulator runs what a GPU of its arch runs: check against that GPU's limits
    check_attention_config(w, step.config, as_target(f"cuda -arch={t.arch}") if t.is_sim else t)
    mod = attention_module(w, step.config)
    # the host takes the module's parameters in its order; the kernel q, k, v[, mask], out
    params = [Buffer(p.name, p.dtype, p.shape) for p in module.main.params]
    by_name = {p.name: p for p in params}
    viewed = operand_views(step.views)
    roles = _roles(module) if viewed is None else _roles_viewed(module, viewed)
    args = [by_name[p.name] for p in roles]
    host = mod.host.replace(params=params, body=Launch(mod.host.body.kernel, args))
    return Module([host, *mod.kernels()])
