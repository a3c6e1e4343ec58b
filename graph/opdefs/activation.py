"""Activation operators on float tensors: ``nn.hard_sigmoid``, ``nn.hard_swish``,
``nn.mish``, ``nn.softplus``, ``nn.softsign``, ``nn.elu``, ``nn.selu``, ``nn.celu``,
``nn.thresholded_relu``, ``nn.swish``, ``nn.gelu`` (erf or tanh form) and ``nn.prelu``
(a slope broadcast against the data)."""

from __future__ import annotations

import math

import numpy as np

from ...ops import activation as act
from ..ir import Call, Node
from .common import fail
from .mapping import FLOATS, SIGNED, register_map, widened


def _floats(attrs: dict) -> dict:
    out = {}
    for k, v in attrs.items():
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            fail("activation", f"attribute {k} must be a number, got {v!r}")
        out[k] = float(v)
    return out


def _softplus(x):
    return np.maximum(x, 0) + np.log1p(np.exp(-np.abs(x)))


def _gelu_ref(x, approximate):
    if approximate == "tanh":
        return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))
    from math import erf

    e = np.vectorize(erf, otypes=[np.float64])(x / math.sqrt(2))
    return 0.5 * x * (1 + e)


def _gelu_normalize(attrs):
    if attrs["approximate"] not in ("none", "tanh"):
        fail("nn.gelu", f"approximate must be 'none' or 'tanh', got {attrs['approximate']!r}")
    return attrs


_ACTIVATIONS = {
    # name: (te function, numpy function, attribute defaults)
    "nn.hard_sigmoid": (act.hard_sigmoid,
                        lambda x, alpha, beta: np.clip(alpha * x + beta, 0, 1),
                        {"alpha": 0.2, "beta": 0.5}),
    "nn.hard_swish": (act.hard_swish, lambda x: x * np.clip(x / 6 + 0.5, 0, 1), {}),
    "nn.mish": (act.mish, lambda x: x * np.tanh(_softplus(x)), {}),
    "nn.softplus": (act.softplus, _softplus, {}),
    "nn.softsign": (act.softsign, lambda x: x / (1 + np.abs(x)), {}),
    "nn.elu": (act.elu, lambda x, alpha: np.where(x > 0, x, alpha * np.expm1(x)),
               {"alpha": 1.0}),
    "nn.selu": (act.selu,
                lambda x, alpha, gamma: gamma * np.where(x > 0, x, alpha * np.expm1(x)),
                {"alpha": 1.67326319217681884765625, "gamma": 1.05070102214813232421875}),
    "nn.celu": (act.celu,
                lambda x, alpha: np.maximum(0, x) + np.minimum(0, alpha * np.expm1(x / alpha)),
                {"alpha": 1.0}),
    "nn.thresholded_relu": (act.thresholded_relu, lambda x, alpha: np.where(x > alpha, x, 0),
                            {"alpha": 1.0}),
    "nn.swish": (act.swish, lambda x, alpha: x / (1 + np.exp(-alpha * x)), {"alpha": 1.0}),
}

for _name, (_te, _np, _defaults) in _ACTIVATIONS.items():
    register_map(_name, 1, (lambda fn: lambda a, attrs: fn(a[0], **attrs))(_te),
                 widened(_np), FLOATS, defaults=_defaults, normalize=_floats)

register_map("nn.gelu", 1, lambda a, attrs: act.gelu(a[0], attrs["approximate"]),
             widened(_gelu_ref), FLOATS, defaults={"approximate": "none"},
             normalize=_gelu_normalize)
register_map("nn.prelu", 2, lambda a, attrs: act.prelu(a[0], a[1]),
             widened(lambda x, s: np.where(x < 0, x * s, x)), FLOATS + SIGNED)


def _ctor(name: str):
    def ctor(x: Node, **attrs) -> Call:
        return Call(name, [x], attrs)

    ctor.__name__ = name.split(".")[-1]
    ctor.__doc__ = f"Element-wise ``{name}`` (attributes: {_ACTIVATIONS[name][2] or 'none'})."
    return ctor


hard_sigmoid = _ctor("nn.hard_sigmoid")
hard_swish = _ctor("nn.hard_swish")
mish = _ctor("nn.mish")
softplus = _ctor("nn.softplus")
softsign = _ctor("nn.softsign")
elu = _ctor("nn.elu")
selu = _ctor("nn.selu")
celu = _ctor("nn.celu")
thresholded_relu = _ctor("nn.thresholded_relu")
swish = _ctor("nn.swish")


def gelu(x: Node, approximate: str = "none") -> Call:
    """GELU: the erf form, or the tanh form with ``approximate="tanh"``."""
    return Call("nn.gelu", [x], {"approximate": approximate})


def prelu(x: Node, slope: Node) -> Call:
    """``x`` where non-negative, else ``slope * x`` (``slope`` broadcast against ``x``)."""
    return Call("nn.prelu", [x, slope])
