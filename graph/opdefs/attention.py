"""Scaled dot-product attention: ``nn.attention``, PyTorch's
``scaled_dot_product_attention`` kept whole.

``nn.attention(q, k, v[, mask], scale=, is_causal=)`` with ``q`` [B, Hq, L, E], ``k``
[B, Hkv, S, E] and ``v`` [B, Hkv, S, Ev] computes, per batch and query head ``h``,
``softmax(q @ k^T * scale + mask) @ v`` where the key and value head is ``h // (Hq / Hkv)``
(grouped-query attention: ``Hq`` a multiple of ``Hkv``; equal for plain multi-head). The
mask broadcasts to [B, Hq, L, S]: a bool mask keeps the scores where it is True (the others
become -inf), a float mask is added. ``is_causal`` masks key ``j > i`` (top-left aligned, as
PyTorch). A row with every score masked gives zeros, as PyTorch's math kernel does.
``layout="bshd"`` takes q, k, v and gives the result as [B, L, H, E] (what the
projections around an attention write and read; ``fold_attention_layout`` rewrites the
head transposes around a fused attention into it). ``views`` (``bshd`` only) reads an
operand as ``(batch, seq, heads, dim, offset)`` out of the rows of a wider argument: the
slices of a combined Q/K/V projection, which ``fold_attention_layout`` folds in too.

Its te lowering is ``ops.attention`` (the scores, the softmax's stages and the weighted sum
of the values, tagged ``attention``); ``fused_attention_module`` compiles such a function as
the one fused tensor-core kernel where ``fused_attention_refusal`` finds no reason against
it. The canonicalization pass ``decompose_attention`` keeps the operator whole only where
:func:`keeps_fused_attention` says so (opt-in: graph pass config ``fused_attention``), and
otherwise writes it as batched products and a softmax.
"""

from __future__ import annotations

import math

import numpy as np

from ..ir import Call, Node, TensorType
from ..op import OpDef, OpPattern, register_op
from .common import broadcast_shapes, expect_float, fail

OP = "nn.attention"


LAYOUTS = ("bhsd", "bshd")


def _bhsd(shape: tuple, layout: str) -> tuple:
    """A q/k/v/output shape as ``[batch, heads, seq, dim]``."""
    return (shape[0], shape[2], shape[1], shape[3]) if layout == "bshd" else tuple(shape)


def _dims(types: list[TensorType], layout: str = "bhsd"
          ) -> tuple[int, int, int, int, int, int, int]:
    if len(types) not in (3, 4):
        fail(OP, f"takes q, k, v and an optional mask (3 or 4 arguments), got {len(types)}")
    q, k, v = types[:3]
    dims = "[batch, seq, heads, dim]" if layout == "bshd" else "[batch, heads, seq, dim]"
    for what, t in (("q", q), ("k", k), ("v", v)):
        if t.ndim != 4:
            fail(OP, f"{what} must be 4-D {dims}, got {t}")
        expect_float(OP, what, t)
    if len({q.dtype, k.dtype, v.dtype}) != 1:
        fail(OP, f"q, k and v have different dtypes {q.dtype}, {k.dtype}, {v.dtype}; cast "
                 "them to one first")
    b, hq, lq, e = _bhsd(q.shape, layout)
    bk, hk, s, ek = _bhsd(k.shape, layout)
    bv, hv, sv, ev = _bhsd(v.shape, layout)
    if not b == bk == bv:
        fail(OP, f"batch sizes differ: q {b}, k {bk}, v {bv}")
    if hk != hv:
        fail(OP, f"k has {hk} heads but v has {hv}")
    if hk == 0 or hq % hk:
        fail(OP, f"q has {hq} heads, not a multiple of the {hk} heads of k and v (grouped-"
                 "query attention needs a whole number of query heads per key head)")
    if ek != e:
        fail(OP, f"q's head dimension is {e} but k's is {ek}")
    if sv != s:
        fail(OP, f"k has {s} positions but v has {sv}")
    return b, hq, hk, lq, s, e, ev


def _viewed_types(types: list, attrs) -> list:
    """The types of q, k, v as the attention reads them: each operand with a view (the
    attribute ``views``: ``(batch, seq, heads, dim, offset)``) is the ``[B, S, H, D]``
    slice of its argument's rows, which must be ``B S`` rows of a last dimension taking
    the ``H D`` elements from ``offset``; the mask as it is."""
    views = attrs.get("views")
    if not views:
        return list(types)
    out = list(types)
    for which, (name, view) in enumerate(zip("qkv", views)):
        if not view:
            continue
        t = types[which]
        b, seq, heads, dim, offset = view
        rows = math.prod(t.shape[:-1]) if t.ndim else 0
        if t.ndim < 2 or rows != b * seq or offset + heads * dim > t.shape[-1]:
            fail(OP, f"the view {list(view)} (batch, seq, heads, dim, offset) of {name} does "
                     f"not fit its argument {t}: it needs {b * seq} rows of at least "
                     f"{offset + heads * dim} elements")
        out[which] = TensorType((b, seq, heads, dim), t.dtype)
    return out


def _infer(types, attrs):
    layout = attrs.get("layout", "bhsd")
    types = _viewed_types(types, attrs)
    b, hq, _, lq, s, _, ev = _dims(types, layout)
    if len(types) == 4:
        mask = types[3]
        if mask.ndim > 4:
            fail(OP, f"the mask must have at most 4 dimensions, got {mask}")
        if mask.dtype != "bool" and not mask.dtype.startswith(("float", "bfloat")):
            fail(OP, f"the mask must be bool (True keeps a score) or float (added to the "
                     f"scores), got {mask.dtype}")
        got = broadcast_shapes(OP, mask.shape, (b, hq, lq, s))
        if got != (b, hq, lq, s):
            fail(OP, f"the mask {list(mask.shape)} does not broadcast to the scores "
                     f"[{b}, {hq}, {lq}, {s}]")
    return TensorType(_bhsd((b, hq, lq, ev), layout), types[0].dtype)


def _normalize(attrs):
    scale = attrs["scale"]
    if scale is not None and (isinstance(scale, bool) or not isinstance(scale, (int, float))):
        fail(OP, f"scale must be a number or None (1/sqrt(head dim)), got {scale!r}")
    if not isinstance(attrs["is_causal"], bool):
        fail(OP, f"is_causal must be a bool, got {attrs['is_causal']!r}")
    out = {"scale": None if scale is None else float(scale), "is_causal": attrs["is_causal"]}
    layout = attrs.get("layout") or "bhsd"
    if layout not in LAYOUTS:
        fail(OP, f"layout must be one of {LAYOUTS}, got {layout!r}")
    if layout != "bhsd":  # the default is left out (graphs print as before)
        out["layout"] = layout
    views = attrs.get("views")
    if views:
        try:
            views = tuple(tuple(int(x) for x in v) if v else () for v in views)
        except (TypeError, ValueError):
            fail(OP, f"views must list, for q, k and v, (batch, seq, heads, dim, offset) or "
                     f"nothing, got {views!r}")
        if len(views) != 3 or any(len(v) not in (0, 5) for v in views):
            fail(OP, f"views must list, for q, k and v, (batch, seq, heads, dim, offset) or "
                     f"nothing, got {views!r}")
        if layout != "bshd":
            fail(OP, "views read q, k and v as [B, S, H, D] slices of rows: layout 'bshd' "
                     f"only, got {layout!r}")
        if any(views):
            out["views"] = views
    return out


def _scale(attrs, e: int) -> float:
    return attrs["scale"] if attrs["scale"] is not None else 1.0 / math.sqrt(e)


def _lower(a, attrs):
    from ...ops.attention import attention as attention_te
    from ...ops.attention import operand_view

    mask = a[3] if len(a) == 4 else None
    qkv = list(a[:3])
    for which, view in enumerate(attrs.get("views") or ()):
        if view:
            qkv[which] = operand_view(qkv[which], view[:4], view[4], "qkv"[which])
    return attention_te(*qkv, mask, attrs["is_causal"], attrs["scale"],
                        attrs.get("layout", "bhsd"))


def view_array(base: np.ndarray, view) -> np.ndarray:
    """The ``[B, S, H, D]`` operand a view ``(batch, seq, heads, dim, offset)`` reads out
    of ``base`` (its rows: every dimension but the last)."""
    b, seq, heads, dim, offset = view
    rows = np.asarray(base).reshape(b * seq, -1)
    return np.ascontiguousarray(rows[:, offset:offset + heads * dim]).reshape(b, seq, heads,
                                                                               dim)


def attention_reference(q: np.ndarray, k: np.ndarray, v: np.ndarray, mask=None,
                        scale: float | None = None, is_causal: bool = False,
                        layout: str = "bhsd") -> np.ndarray:
    """The numpy reference of ``nn.attention`` (float64 inside, rounded once at the end)."""
    from ...ir import dtype as dt
    from ...ops.attention_testing import attention_python
    from .elemwise import cast_array

    out = attention_python(q, k, v, mask, scale, is_causal, layout=layout)
    return cast_array(out, dt.from_numpy(np.asarray(q).dtype))


def _ref(a, attrs):
    qkv = [view_array(x, view) if view else x
           for x, view in zip(a[:3], attrs.get("views") or ((), (), ()))]
    return attention_reference(*qkv, a[3] if len(a) == 4 else None,
                               attrs["scale"], attrs["is_causal"], attrs.get("layout", "bhsd"))


register_op(OpDef(
    name=OP, num_inputs=None, infer=_infer, lower=_lower, ref=_ref, pattern=OpPattern.OPAQUE,
    defaults={"scale": None, "is_causal": False, "layout": None, "views": None},
    normalize=_normalize,
))


def attention(q: Node, k: Node, v: Node, mask: Node | None = None, scale: float | None = None,
              is_causal: bool = False, layout: str = "bhsd", views=None) -> Call:
    """``softmax(q @ k^T * scale + mask) @ v`` per head (see the module's docstring);
    ``scale`` None is ``1 / sqrt(head dim)``; ``layout`` ``"bshd"``: q, k, v and the
    result ``[B, L, H, E]``; ``views`` (``bshd`` only): for each of q, k, v, ``(batch,
    seq, heads, dim, offset)`` where the argument is a wider tensor whose rows hold the
    operand's ``heads x dim`` elements from ``offset`` (the slices of a combined Q/K/V
    projection, see ``fold_attention_layout``), or ``()`` for an operand given as it is."""
    args = [q, k, v] + ([mask] if mask is not None else [])
    attrs = {"scale": scale, "is_causal": is_causal}
    if layout != "bhsd":
        attrs["layout"] = layout
    if views:
        attrs["views"] = views
    return Call(OP, args, attrs)


def operand_types(call: Call) -> list:
    """The types of ``call``'s q, k, v as the attention reads them (through its views)."""
    return _viewed_types([a.ty for a in call.args[:3]], call.attrs)


FUSED_OPTION = "fused_attention"
"""The graph pass config key that keeps eligible ``nn.attention`` calls whole for the fused
kernel (``GraphPassContext(config={"fused_attention": True})``)."""

FUSED_AUTO = "auto"
"""The ``fused_attention`` setting by default: the fused kernel where the keys are at least
:data:`AUTO_MIN_KEYS`, the batched products and softmax below."""

AUTO_MIN_KEYS = 128
"""Keys from which ``fused_attention="auto"`` runs the fused kernel. With today's kernel
(base-2 softmax, masks staged per tile, 128-key tiles for head dim 64) the fused attention
of HF BERT-base at batch 1, sequence 128 (ONNX export, fp16, default schedules, H200) takes
3.6 us a layer against 6.9 for the products and softmax, the whole model 0.357 against
0.389 ms (``bench/results/bert_s128_fused_h200_2026-11-28.txt``); from 512 keys it was 19-39%
faster already. Below 128 keys it is not measured: those stay decomposed."""

FUSED_PRECISION_OPTION = "fused_attention.precision"
"""The graph pass config key holding the build's ``precision`` while ``fused_attention`` is
on (set by ``graph.build``): a float32 attention of a 16-bit build is judged in that dtype."""


def fused_attention_refusal(call: Call, target=None, dtype: str | None = None) -> str | None:
    """Why the fused kernel cannot run ``call`` on ``target`` (default: the current one), or
    None when it can: 16-bit inputs, head dims multiples of 16 up to 256, a bool or float
    mask, an sm_80 or newer target, and a configuration that fits it. ``dtype``: the dtype
    the call will run in, where a later pass changes it (``to_mixed_precision`` casts a
    float32 attention's q, k and v to the build's 16-bit precision; its mask stays)."""
    from ...ops.schedules.attention import (
        AttentionError,
        AttentionMask,
        AttentionWorkload,
        choose_attention_config,
    )
    from ...target import Target, as_target

    if call.op != OP:
        return f"{call.op} is not {OP}"
    q, k, v = operand_types(call)
    dtype = dtype or q.dtype
    mask = None
    if len(call.args) == 4:
        m = call.args[3]
        mask = AttentionMask(tuple(m.shape), m.dtype)  # to_mixed_precision keeps it
    layout = call.attrs.get("layout", "bhsd")
    b, hq, lq, e = _bhsd(q.shape, layout)
    _, hk, s, _ = _bhsd(k.shape, layout)
    w = AttentionWorkload(b, hq, hk, lq, s, e, v.shape[3], dtype,
                          call.attrs["is_causal"], call.attrs["scale"], mask, layout,
                          _workload_views(call))
    t = as_target(target) if target is not None else Target.current() or as_target("cuda")
    if t.is_sim:
        t = as_target(f"cuda -arch={t.arch}")
    try:
        choose_attention_config(w, t)
    except AttentionError as e:
        return str(e)
    return None


def _workload_views(call: Call) -> tuple | None:
    """The kernel's :class:`~ptxforge.ops.schedules.attention.OperandView` of each operand
    of ``call`` (None where it has no view), or None."""
    from ...ops.schedules.attention.workload import OperandView

    views = call.attrs.get("views")
    if not views:
        return None
    return tuple(OperandView(a.shape[-1], v[4], tuple(a.shape)) if v else None
                 for a, v in zip(call.args[:3], views))


def keeps_fused_attention(call: Call) -> bool:
    """Whether ``decompose_attention`` leaves ``call`` whole: the active graph pass
    context's config asks for the fused kernel (``fused_attention`` True, or
    :data:`FUSED_AUTO` (the default) with at least :data:`AUTO_MIN_KEYS` keys) and the
    kernel can run it (:func:`fused_attention_refusal`)."""
    from ..passes.base import GraphPassContext

    config = GraphPassContext.current().config
    choice = config.get(FUSED_OPTION, FUSED_AUTO)
    if not choice:
        return False
    if choice == FUSED_AUTO:
        _, _, s, _ = _bhsd(operand_types(call)[1].shape, call.attrs.get("layout", "bhsd"))
        if s < AUTO_MIN_KEYS:
            return False
    low = config.get(FUSED_PRECISION_OPTION)
    # a float32 attention of a float16/bfloat16 build runs in that dtype after
    # to_mixed_precision (nn.attention is one of its ALWAYS operators)
    dtype = low if call.args[0].dtype == "float32" and low in ("float16", "bfloat16") else None
    return fused_attention_refusal(call, dtype=dtype) is None


def fused_attention_module(func, target=None):
    """The device module of the fused kernel for a fused function (a
    :class:`~ptxforge.graph.fused.FusedFunction`) that computes one ``nn.attention`` of its
    inputs, with the host parameters named and ordered as the function's tensors; None for
    any other function, or one the kernel cannot run. The configuration is the best record
    of the AutoTVM template ``attention.cuda`` for the problem inside
    ``autotvm.apply_history_best(log)``, else the default chooser's."""
    from ...ops.attention import TAG, attention_inputs, attention_workload
    from ...ops.schedules.attention import (
        AttentionError,
        attention_module,
        choose_attention_config,
    )
    from ...target import Target, as_target

    tensors = func.build_tensors()
    out = tensors[-1]
    if getattr(out.op, "tag", "") != TAG:
        return None
    ins = attention_inputs(out)
    # every input of the function is an operand (q, k and v may be one tensor: the views
    # of a combined projection)
    if {id(t) for t in ins} != {id(t) for t in tensors[:-1]}:
        return None  # something else fused into the function
    w = attention_workload(out)
    t = as_target(target) if target is not None else Target.current() or as_target("cuda")
    limits = as_target(f"cuda -arch={t.arch}") if t.is_sim else t
    try:
        choose_attention_config(w, limits)  # can the kernel run it at all
    except AttentionError:
        return None
    # a tuned record of attention.cuda (inside apply_history_best), else the default
    from ...autotvm.attention import dispatched_config

    with limits:
        cfg = dispatched_config(w)
    mod = attention_module(w, cfg, name=func.name)
    host = mod.host
    from ...ir.stmt import Buffer, Launch, Module

    # the host takes the function's tensors; the kernel q, k, v[, mask], out, where some
    # may be one tensor
    params = {id(t_): Buffer(t_.name, t_.dtype, tuple(int(d) for d in t_.shape))
              for t_ in tensors}
    new_host = host.replace(params=list(params.values()),
                            body=Launch(host.body.kernel, [params[id(t_)] for t_ in
                                                           (*ins, out)]))
    return Module([new_host, *mod.kernels()])
