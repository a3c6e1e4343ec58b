"""``nn.conv_nd`` (channel-first, grouped, any number of spatial dims; the ONNX importer
uses it for 3-D) and ``nn.conv_transpose`` (1-D, 2-D and 3-D, grouped, with output
padding), lowered to :mod:`ptxforge.ops.nn.conv_nd`.

1-D convolutions are not operators of their own: the ONNX importer writes them as
``nn.conv2d`` over a unit height, so they reach the 2-D kernels and their schedules.
Both operators fuse their element-wise consumers (bias, activation) into their epilogue.
"""

from __future__ import annotations

from ...ops.nn import conv_nd as C
from ..ir import Call, Node, TensorType
from ..op import OpDef, OpPattern, register_op
from .common import as_graph_error, expect_float, fail, same_dtype


def _normalize(name: str, rank: int | None):
    def normalize(attrs: dict) -> dict:
        out = dict(attrs)
        k = rank if rank is not None else len(attrs["strides"])
        for key in ("strides", "dilation") + (("output_padding",) if "output_padding" in attrs
                                              else ()):
            value = attrs[key]
            low = 0 if key == "output_padding" else 1
            value = (value,) * k if isinstance(value, int) else tuple(int(v) for v in value)
            if len(value) != k or any(v < low for v in value):
                fail(name, f"{key} must be {k} ints >= {low} (one per spatial axis), got "
                           f"{attrs[key]!r}")
            out[key] = value
        pad = attrs["padding"]
        pad = (pad,) * (2 * k) if isinstance(pad, int) else tuple(int(v) for v in pad)
        if len(pad) != 2 * k or any(v < 0 for v in pad):
            fail(name, f"padding must be {2 * k} non-negative ints (all befores, then all "
                       f"afters, as ONNX's pads), got {attrs['padding']!r}")
        out["padding"] = pad
        groups = attrs["groups"]
        if isinstance(groups, bool) or not isinstance(groups, int) or groups < 1:
            fail(name, f"groups must be a positive int, got {groups!r}")
        return out

    return normalize


def _split(attrs: dict) -> tuple:
    k = len(attrs["strides"])
    return attrs["padding"][:k], attrs["padding"][k:]


def _conv_nd_infer(types, attrs):
    op = "nn.conv_nd"
    data, weight = types
    k = len(attrs["strides"])
    if data.ndim != k + 2 or weight.ndim != k + 2:
        fail(op, f"a {k}-D convolution takes data [N, C] + {k} spatial dims and a weight "
                 f"[O, C/groups] + {k} kernel dims, got {data} and {weight}")
    same_dtype(op, [data, weight])
    expect_float(op, "data", data)
    c, o, cg, g = data.shape[1], weight.shape[0], weight.shape[1], attrs["groups"]
    if c % g or o % g or cg * g != c:
        fail(op, f"data has {c} channels but weight {list(weight.shape)} expects {cg} per "
                 f"group x {g} groups (and groups must divide the {o} output channels)")
    before, after = _split(attrs)
    with as_graph_error():
        out = [C.conv_nd_size(op, data.shape[2 + j], weight.shape[2 + j], attrs["strides"][j],
                              attrs["dilation"][j], before[j], after[j]) for j in range(k)]
    return TensorType((data.shape[0], o, *out), attrs["out_dtype"] or data.dtype)


def _conv_nd_lower(a, attrs):
    before, after = _split(attrs)
    return C.conv_nd(a[0], a[1], attrs["strides"], before, after, attrs["dilation"],
                     attrs["groups"], attrs["out_dtype"] or None)


def _conv_nd_ref(a, attrs):
    before, after = _split(attrs)
    out = C.conv_nd_reference(a[0], a[1], attrs["strides"], before, after, attrs["dilation"],
                              attrs["groups"])
    return out.astype(attrs["out_dtype"] or a[0].dtype)


register_op(OpDef(
    name="nn.conv_nd", num_inputs=2, infer=_conv_nd_infer, lower=_conv_nd_lower,
    ref=_conv_nd_ref, pattern=OpPattern.OUT_ELEMWISE_FUSABLE,
    defaults={"strides": (1, 1, 1), "padding": 0, "dilation": 1, "groups": 1,
              "out_dtype": ""},
    normalize=_normalize("nn.conv_nd", None),
))


def conv_nd(data: Node, weight: Node, strides, padding=0, dilation=1, groups: int = 1,
            out_dtype: str = "") -> Call:
    """Convolution of channel-first data ``[N, C, D1..Dk]`` with a weight
    ``[O, C/groups, K1..Kk]``; ``strides`` (one per spatial axis) sets the rank, ``padding``
    is an int or 2k ints (the k befores, then the k afters, as ONNX's pads)."""
    return Call("nn.conv_nd", [data, weight], {
        "strides": tuple(strides), "padding": padding, "dilation": dilation,
        "groups": groups, "out_dtype": out_dtype})


def _ct_infer(types, attrs):
    op = "nn.conv_transpose"
    data, weight = types
    k = len(attrs["strides"])
    if data.ndim != k + 2 or weight.ndim != k + 2:
        fail(op, f"a {k}-D transposed convolution takes data [N, C] + {k} spatial dims and a "
                 f"weight [C, O/groups] + {k} kernel dims, got {data} and {weight}")
    same_dtype(op, [data, weight])
    expect_float(op, "data", data)
    c, g = data.shape[1], attrs["groups"]
    if weight.shape[0] != c or c % g:
        fail(op, f"weight {list(weight.shape)} must have the data's {c} channels first, and "
                 f"groups={g} must divide them")
    before, after = _split(attrs)
    out = [C.conv_transpose_size(data.shape[2 + j], weight.shape[2 + j], attrs["strides"][j],
                                 attrs["dilation"][j], before[j], after[j],
                                 attrs["output_padding"][j]) for j in range(k)]
    if any(v < 1 for v in out):
        fail(op, f"the output would have extents {out}; the padding is too large")
    return TensorType((data.shape[0], weight.shape[1] * g, *out), data.dtype)


def _ct_args(attrs) -> tuple:
    before, after = _split(attrs)
    return (attrs["strides"], before, after, attrs["dilation"], attrs["output_padding"],
            attrs["groups"])


register_op(OpDef(
    name="nn.conv_transpose", num_inputs=2, infer=_ct_infer,
    lower=lambda a, attrs: C.conv_transpose_nd(a[0], a[1], *_ct_args(attrs)),
    ref=lambda a, attrs: C.conv_transpose_nd_reference(a[0], a[1], *_ct_args(attrs)),
    pattern=OpPattern.OUT_ELEMWISE_FUSABLE,
    defaults={"strides": (1,), "padding": 0, "dilation": 1, "groups": 1,
              "output_padding": 0},
    normalize=_normalize("nn.conv_transpose", None),
))


def conv_transpose(data: Node, weight: Node, strides, padding=0, dilation=1,
                   output_padding=0, groups: int = 1) -> Call:
    """Transposed convolution (ONNX ``ConvTranspose``) of channel-first data with a weight
    ``[C, O/groups, K1..Kk]``; ``strides`` (one per spatial axis) sets the rank, ``padding``
    crops the output (the k befores, then the k afters), ``output_padding`` extends its
    end."""
    return Call("nn.conv_transpose", [data, weight], {
        "strides": tuple(strides), "padding": padding, "dilation": dilation,
        "output_padding": output_padding, "groups": groups})
