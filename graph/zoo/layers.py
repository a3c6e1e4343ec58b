"""Building blocks of the model zoo: seeded random weights and layout-aware layers."""

from __future__ import annotations

import numpy as np

from .. import opdefs as G
from ..ir import GraphError, Node, Var


class NetBuilder:
    """Creates weights (as graph vars with values in ``params``) and layers in one layout.

    Weights are He-normal (fan-in) times an optional gain (residual branches end with a gain
    of 0.5 so activations stay in range through deep networks), batch-norm statistics are
    mild random values, all drawn from one seeded generator, so a network and its weights
    are reproducible.
    """

    def __init__(self, layout: str = "NCHW", dtype: str = "float32", seed: int = 0):
        if layout not in ("NCHW", "NHWC"):
            raise GraphError(f"layout must be NCHW or NHWC, got {layout!r}")
        self.layout = layout
        self.dtype = dtype
        self.rng = np.random.default_rng(seed)
        self.params: dict[str, np.ndarray] = {}

    @property
    def channel_axis(self) -> int:
        return 1 if self.layout == "NCHW" else 3

    def channels(self, x: Node) -> int:
        return x.shape[self.channel_axis]

    def param(self, name: str, value: np.ndarray) -> Var:
        if name in self.params:
            raise GraphError(f"weight {name} is defined twice")
        value = np.ascontiguousarray(value.astype(self.dtype))
        self.params[name] = value
        return Var(name, value.shape, self.dtype)

    def normal(self, name: str, shape, std: float) -> Var:
        return self.param(name, self.rng.standard_normal(shape) * std)

    # -- layers -----------------------------------------------------------------------------

    def conv(self, x: Node, name: str, channels: int, kernel, strides=1, padding=0,
             groups: int = 1, bias: bool = False, gain: float = 1.0) -> Node:
        kh, kw = (kernel, kernel) if isinstance(kernel, int) else kernel
        cin = self.channels(x)
        per_group = cin // groups
        shape = ((channels, per_group, kh, kw) if self.layout == "NCHW"
                 else (kh, kw, per_group, channels))
        w = self.normal(f"{name}_weight", shape, gain * np.sqrt(2.0 / (per_group * kh * kw)))
        y = G.conv2d(x, w, strides, padding, groups=groups, data_layout=self.layout)
        if bias:
            b = self.normal(f"{name}_bias", (channels,), 0.05)
            y = G.bias_add(y, b, self.channel_axis)
        return y

    def batch_norm(self, x: Node, name: str, epsilon: float = 1e-5, scale: bool = True) -> Node:
        c = self.channels(x)
        gamma = self.param(f"{name}_gamma", self.rng.uniform(0.8, 1.2, c))
        beta = self.param(f"{name}_beta", self.rng.normal(0, 0.1, c))
        mean = self.param(f"{name}_moving_mean", self.rng.normal(0, 0.1, c))
        var = self.param(f"{name}_moving_var", self.rng.uniform(0.8, 1.2, c))
        return G.batch_norm(x, gamma, beta, mean, var, self.channel_axis, epsilon, scale=scale)

    def conv_bn(self, x: Node, name: str, channels: int, kernel, strides=1, padding=0,
                groups: int = 1, relu: str | None = "relu", epsilon: float = 1e-5,
                gain: float = 1.0) -> Node:
        conv = self.conv(x, name, channels, kernel, strides, padding, groups, gain=gain)
        y = self.batch_norm(conv, f"{name}_bn", epsilon)
        if relu == "relu":
            return G.relu(y)
        if relu == "relu6":
            return G.clip(y, 0.0, 6.0)
        return y

    def max_pool(self, x: Node, size, strides, padding=0) -> Node:
        return G.max_pool2d(x, size, strides, padding, layout=self.layout)

    def avg_pool(self, x: Node, size, strides, padding=0, count_include_pad=False) -> Node:
        return G.avg_pool2d(x, size, strides, padding, layout=self.layout,
                            count_include_pad=count_include_pad)

    def global_pool(self, x: Node) -> Node:
        return G.global_avg_pool2d(x, self.layout)

    def concat(self, xs: list[Node]) -> Node:
        return G.concatenate(xs, self.channel_axis)

    def dense(self, x: Node, name: str, units: int, bias: bool = True,
              std: float | None = None) -> Node:
        k = x.shape[-1]
        w = self.normal(f"{name}_weight", (units, k), std if std is not None else np.sqrt(1.0 / k))
        y = G.dense(x, w, units)
        if bias:
            y = G.bias_add(y, self.normal(f"{name}_bias", (units,), 0.02), axis=-1)
        return y

    def classifier(self, x: Node, num_classes: int, name: str = "fc1") -> Node:
        """Global average pool, flatten, dense with bias, softmax."""
        flat = G.batch_flatten(self.global_pool(x))
        return G.softmax(self.dense(flat, name, num_classes))

    def image(self, batch: int, channels: int, size: int) -> tuple[Var, tuple]:
        shape = ((batch, channels, size, size) if self.layout == "NCHW"
                 else (batch, size, size, channels))
        return Var("data", shape, self.dtype), shape
