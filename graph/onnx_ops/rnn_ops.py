"""ONNX ``RNN``, ``GRU`` and ``LSTM``, unrolled over the static sequence length.

Per direction, the input projection of every step is one product (``X W^T + Wb`` over all
steps at once); each step then adds its recurrent product (``H R^T + Rb``), splits the
gates (RNN: one; GRU: z, r, h; LSTM: i, o, f, c with peepholes i, o, f) and applies the
activations, ``clip`` bounding their inputs. ``reverse`` runs the steps backwards,
``bidirectional`` both, and ``layout=1`` takes and gives batch-first tensors. The outputs
``Y`` (every step's hidden state), ``Y_h`` (the last one) and, for LSTM, ``Y_c``.

``sequence_lens`` is accepted when every sequence runs the full length (what its values
must be known at import to show); shorter sequences would need per-batch masks of the
state, which are not built. LSTM's ``input_forget`` is not supported.
"""

from __future__ import annotations

import numpy as np

from .. import opdefs as G
from ..frontend_onnx import OnnxImportError, register_converter
from ..ir import Call, Constant, Node
from ..opdefs import logic as GL
from ..opdefs.arith import binary, unary
from ..opdefs.linear import dense

_GATES = {"RNN": 1, "GRU": 3, "LSTM": 4}
_DEFAULT_ACTS = {"RNN": ["Tanh"], "GRU": ["Sigmoid", "Tanh"],
                 "LSTM": ["Sigmoid", "Tanh", "Tanh"]}
_ALPHA = {"LeakyRelu": 0.01, "ThresholdedRelu": 1.0, "Elu": 1.0, "HardSigmoid": 0.2,
          "Affine": 1.0, "ScaledTanh": 1.0}
_BETA = {"HardSigmoid": 0.5, "Affine": 0.0, "ScaledTanh": 1.0}


def _text(v) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


def _slice(x: Node, begin: int, end: int, axis: int) -> Node:
    return Call("strided_slice", [x], {"begin": [begin], "end": [end], "axes": [axis]})


class _Act:
    """An ONNX RNN activation as graph operators."""

    def __init__(self, name: str, alpha: float, beta: float, dtype: str):
        self.name, self.alpha, self.beta, self.dtype = name, alpha, beta, dtype

    def k(self, v: float) -> Constant:
        return Constant(np.array(v, dtype=self.dtype), "", self.dtype)

    def __call__(self, x: Node) -> Node:
        n, a, b = self.name, self.alpha, self.beta
        if n == "Tanh":
            return G.tanh(x)
        if n == "Sigmoid":
            return G.sigmoid(x)
        if n == "Relu":
            return G.relu(x)
        if n == "LeakyRelu":
            return GL.where(Call("greater_equal", [x, self.k(0.0)]), x,
                            binary("multiply", x, self.k(a)))
        if n == "ThresholdedRelu":
            return GL.where(Call("greater", [x, self.k(a)]), x, self.k(0.0))
        if n == "Elu":
            neg = binary("multiply", binary("subtract", G.exp(x), self.k(1.0)), self.k(a))
            return GL.where(Call("greater_equal", [x, self.k(0.0)]), x, neg)
        if n == "HardSigmoid":
            return G.clip(binary("add", binary("multiply", x, self.k(a)), self.k(b)), 0.0, 1.0)
        if n == "Affine":
            return binary("add", binary("multiply", x, self.k(a)), self.k(b))
        if n == "ScaledTanh":
            return binary("multiply", G.tanh(binary("multiply", x, self.k(b))), self.k(a))
        if n == "Softsign":
            return binary("divide", x, binary("add", unary("abs", x), self.k(1.0)))
        if n == "Softplus":
            return G.log(binary("add", G.exp(x), self.k(1.0)))
        raise AssertionError(n)


_KNOWN = ("Tanh", "Sigmoid", "Relu", "LeakyRelu", "ThresholdedRelu", "Elu", "HardSigmoid",
          "Affine", "ScaledTanh", "Softsign", "Softplus")


def _activations(node, a, op: str, dirs: int, dtype: str) -> list[list[_Act]]:
    """Per direction, the op's activation functions (f, g[, h])."""
    per = len(_DEFAULT_ACTS[op])
    names = [_text(v) for v in a.get("activations", [])] or _DEFAULT_ACTS[op] * dirs
    if len(names) == per and dirs == 2:
        names = names * 2
    if len(names) != per * dirs:
        raise OnnxImportError(f"{op} {node.name!r}: {len(names)} activations given; it takes "
                              f"{per} per direction ({dirs})")
    alphas = [float(v) for v in a.get("activation_alpha", [])]
    betas = [float(v) for v in a.get("activation_beta", [])]
    acts = []
    for n in names:
        if n not in _KNOWN:
            raise OnnxImportError(f"{op} {node.name!r}: activation {n!r} is not supported; "
                                  f"supported: {', '.join(_KNOWN)}")
        alpha = alphas.pop(0) if n in _ALPHA and alphas else _ALPHA.get(n, 0.0)
        beta = betas.pop(0) if n in _BETA and betas else _BETA.get(n, 0.0)
        acts.append(_Act(n, alpha, beta, dtype))
    return [acts[d * per:(d + 1) * per] for d in range(dirs)]


def _optional(im, node, k: int):
    return im.tensor(node.input[k]) if len(node.input) > k and node.input[k] else None


def _recurrent(im, node, a, op: str):
    x, w, r = (im.tensor(i) for i in node.input[:3])
    b = _optional(im, node, 3)
    lens = node.input[4] if len(node.input) > 4 else ""
    h0 = _optional(im, node, 5)
    c0 = _optional(im, node, 6) if op == "LSTM" else None
    p = _optional(im, node, 7) if op == "LSTM" else None
    direction = _text(a.get("direction", "forward"))
    dirs = 2 if direction == "bidirectional" else 1
    if direction not in ("forward", "reverse", "bidirectional"):
        raise OnnxImportError(f"{op} {node.name!r}: direction {direction!r}")
    layout = int(a.get("layout", 0))
    if x.ndim != 3 or w.ndim != 3 or w.shape[0] != dirs:
        raise OnnxImportError(f"{op} {node.name!r}: X must be 3-D and W [{dirs}, gates * "
                              f"hidden, input], got {list(x.shape)} and {list(w.shape)}")
    if x.dtype not in ("float16", "bfloat16", "float32", "float64"):
        raise OnnxImportError(f"{op} {node.name!r}: X has dtype {x.dtype}; floats only")
    if layout:
        x = G.transpose(x, [1, 0, 2])
        h0 = G.transpose(h0, [1, 0, 2]) if h0 is not None else None
        c0 = G.transpose(c0, [1, 0, 2]) if c0 is not None else None
    seq, batch, _ = x.shape
    hidden = int(a.get("hidden_size", r.shape[-1]))
    gates = _GATES[op]
    if w.shape[1] != gates * hidden or tuple(r.shape) != (dirs, gates * hidden, hidden):
        raise OnnxImportError(f"{op} {node.name!r}: W and R must have {gates} * hidden_size "
                              f"({hidden}) rows, got {list(w.shape)} and {list(r.shape)}")
    if lens:
        values = np.asarray(im.value(lens, f"{op}'s sequence_lens (shorter sequences are "
                                           "not supported: they must all be known to run "
                                           "the full length)"))
        if not (values == seq).all():
            raise OnnxImportError(f"{op} {node.name!r}: sequence_lens {values.tolist()} "
                                  f"shorter than the sequence ({seq}) are not supported")
    if op == "LSTM" and int(a.get("input_forget", 0)):
        raise OnnxImportError(f"LSTM {node.name!r}: input_forget=1 is not supported")
    if seq == 0 or batch == 0:
        raise OnnxImportError(f"{op} {node.name!r}: empty tensors are not supported")
    clip = a.get("clip")
    acts = _activations(node, a, op, dirs, x.dtype)
    lbr = bool(int(a.get("linear_before_reset", 0))) if op == "GRU" else False
    dtype = x.dtype

    def zeros(*shape):
        return Constant(np.zeros(shape, dtype=dtype), "", dtype)

    def bound(v):
        return G.clip(v, -float(clip), float(clip)) if clip is not None else v

    ys, hs, cs = [], [], []
    for d in range(dirs):
        wd = G.reshape(_slice(w, d, d + 1, 0), (gates * hidden, w.shape[2]))
        rd = G.reshape(_slice(r, d, d + 1, 0), (gates * hidden, hidden))
        if b is not None:
            bd = G.reshape(_slice(b, d, d + 1, 0), (2 * gates * hidden,))
            wb, rb = _slice(bd, 0, gates * hidden, 0), _slice(bd, gates * hidden,
                                                               2 * gates * hidden, 0)
        else:
            wb = rb = zeros(gates * hidden)
        xw = binary("add", dense(G.reshape(x, (seq * batch, x.shape[2])), wd), wb)
        xw = G.reshape(xw, (seq, batch, gates * hidden))
        h = (G.reshape(_slice(h0, d, d + 1, 0), (batch, hidden)) if h0 is not None
             else zeros(batch, hidden))
        c = (G.reshape(_slice(c0, d, d + 1, 0), (batch, hidden)) if c0 is not None
             else zeros(batch, hidden))
        peep = None
        if p is not None:
            pd = G.reshape(_slice(p, d, d + 1, 0), (3 * hidden,))
            peep = [_slice(pd, k * hidden, (k + 1) * hidden, 0) for k in range(3)]  # i, o, f
        f, g = acts[d][0], acts[d][1] if len(acts[d]) > 1 else None
        reverse = direction == "reverse" or d == 1
        steps = [None] * seq
        for t in (range(seq - 1, -1, -1) if reverse else range(seq)):
            xt = G.reshape(_slice(xw, t, t + 1, 0), (batch, gates * hidden))

            def gate(v, k):
                return _slice(v, k * hidden, (k + 1) * hidden, 1)

            if op == "RNN":
                hr = binary("add", dense(h, rd), rb)
                h = f(bound(binary("add", xt, hr)))
            elif op == "GRU":
                hr = binary("add", dense(h, rd), rb)
                z = f(bound(binary("add", gate(xt, 0), gate(hr, 0))))
                rr = f(bound(binary("add", gate(xt, 1), gate(hr, 1))))
                rh = _slice(rd, 2 * hidden, 3 * hidden, 0)
                rbh = _slice(rb, 2 * hidden, 3 * hidden, 0)
                if lbr:
                    inner = binary("multiply", rr, gate(hr, 2))
                else:
                    inner = binary("add", dense(binary("multiply", rr, h), rh), rbh)
                hh = g(bound(binary("add", gate(xt, 2), inner)))
                one = Constant(np.array(1.0, dtype=dtype), "", dtype)
                h = binary("add", binary("multiply", binary("subtract", one, z), hh),
                           binary("multiply", z, h))
            else:
                hr = binary("add", dense(h, rd), rb)
                pre = [binary("add", gate(xt, k), gate(hr, k)) for k in range(4)]  # i o f c
                if peep is not None:
                    pre[0] = binary("add", pre[0], binary("multiply", peep[0], c))
                    pre[2] = binary("add", pre[2], binary("multiply", peep[2], c))
                i_t, f_t = f(bound(pre[0])), f(bound(pre[2]))
                c_t = g(bound(pre[3]))
                c = binary("add", binary("multiply", f_t, c), binary("multiply", i_t, c_t))
                if peep is not None:
                    pre[1] = binary("add", pre[1], binary("multiply", peep[1], c))
                o_t = f(bound(pre[1]))
                h = binary("multiply", o_t, acts[d][2](c))
            steps[t] = h
        ys.append(G.concatenate([G.reshape(s, (1, 1, batch, hidden)) for s in steps], 0))
        hs.append(G.reshape(h, (1, batch, hidden)))
        cs.append(G.reshape(c, (1, batch, hidden)))
    y = ys[0] if dirs == 1 else G.concatenate(ys, 1)  # [seq, dirs, batch, hidden]
    yh = hs[0] if dirs == 1 else G.concatenate(hs, 0)
    yc = cs[0] if dirs == 1 else G.concatenate(cs, 0)
    if layout:
        y = G.transpose(y, [2, 0, 1, 3])
        yh = G.transpose(yh, [1, 0, 2])
        yc = G.transpose(yc, [1, 0, 2])
    return [y, yh, yc] if op == "LSTM" else [y, yh]


for _op in _GATES:
    register_converter(_op)(lambda im, node, a, _op=_op: _recurrent(im, node, a, _op))
