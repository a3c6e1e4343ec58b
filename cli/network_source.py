"""Where a command's network comes from: a zoo name (``resnet_v1-18``) or an ONNX file
(``model.onnx``), with ``--input NAME:SHAPE[:DTYPE[:LOW..HIGH]]`` giving the shapes of
dynamic inputs (``input_ids:1x128:int64:0..30522``) and random inputs to run it on."""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class InputArg:
    """One ``--input``: name, shape, dtype (None: the model's), and the range ``[low,
    high)`` of random integer values (token ids need the vocabulary's size)."""

    name: str
    shape: tuple
    dtype: str | None = None
    low: int = 0
    high: int = 2


@dataclass(frozen=True)
class LoadedNetwork:
    """A network to tune, build or inspect: its graph, weights, inputs (name -> (shape,
    dtype)), the integer ranges of random inputs, and a label for messages."""

    net: object
    params: dict
    inputs: dict
    ranges: dict
    label: str

    def random_inputs(self, seed: int = 0) -> dict:
        """Inputs to run the network on: uniform [0, 1) floats, integers in their range
        (``--input ...:LOW..HIGH``, default 0..2: valid ids and masks), random bools."""
        rng = np.random.default_rng(seed)
        feeds = {}
        for name, (shape, dtype) in self.inputs.items():
            if dtype == "bool":
                feeds[name] = rng.integers(0, 2, shape).astype(bool)
            elif dtype.startswith(("int", "uint")):
                low, high = self.ranges.get(name, (0, 2))
                feeds[name] = rng.integers(low, high, shape).astype(dtype)
            else:
                feeds[name] = rng.uniform(size=shape).astype(dtype)
        return feeds


def parse_input(text: str) -> InputArg:
    """``NAME:SHAPE[:DTYPE[:LOW..HIGH]]`` with SHAPE as ``1x128`` (``x`` or ``,``
    between dims; ``scalar`` for a 0-d input)."""
    parts = text.split(":")
    if len(parts) < 2 or not parts[0] or len(parts) > 4:
        raise ValueError(f"--input {text!r}: expected NAME:SHAPE[:DTYPE[:LOW..HIGH]], e.g. "
                         "input_ids:1x128:int64:0..30522")
    name, shape_text = parts[0], parts[1]
    try:
        shape = () if shape_text == "scalar" else tuple(
            int(d) for d in shape_text.replace(",", "x").split("x"))
    except ValueError:
        raise ValueError(f"--input {text!r}: the shape {shape_text!r} is not dims joined by "
                         "'x' (1x3x224x224)") from None
    if any(d < 0 for d in shape):
        raise ValueError(f"--input {text!r}: negative dimension")
    dtype = parts[2] if len(parts) > 2 and parts[2] else None
    if dtype is not None:
        from ..ir import dtype as dt

        try:
            dt.check(dtype)
        except Exception:  # noqa: BLE001 - dtype's own error type
            raise ValueError(f"--input {text!r}: unknown dtype {dtype!r}") from None
    low, high = 0, 2
    if len(parts) > 3:
        try:
            lo, hi = parts[3].split("..")
            low, high = int(lo), int(hi)
        except ValueError:
            raise ValueError(f"--input {text!r}: the value range {parts[3]!r} is not "
                             "LOW..HIGH") from None
        if high <= low:
            raise ValueError(f"--input {text!r}: empty value range {low}..{high}")
    return InputArg(name, shape, dtype, low, high)


def is_model_file(network: str) -> bool:
    """Whether ``network`` names an ONNX file rather than a zoo network."""
    return network.endswith(".onnx") or os.path.sep in network or os.path.isfile(network)


def load_network(network: str, input_args: list[str] | None = None, *, batch_size: int = 1,
                 layout: str = "NCHW", image_size: int | None = None) -> LoadedNetwork:
    """The network a command names: an ONNX file (``--input`` gives shapes of dynamic
    inputs, dtypes to check, integer ranges) or a zoo network (its input is ``data``)."""
    from .. import graph

    specs = [parse_input(t) for t in input_args or []]
    if not is_model_file(network):
        if specs:
            raise ValueError("--input applies to ONNX models; a zoo network's input is "
                             "'data', shaped by --batch-size and --image-size")
        if network not in graph.list_networks():
            raise ValueError(f"unknown network {network!r}: give an ONNX file (.onnx) or one "
                             f"of {', '.join(graph.list_networks())}")
        net, params, input_shape, _ = graph.get_network(network, batch_size, layout,
                                                        image_size=image_size)
        return LoadedNetwork(net, params, {"data": (tuple(input_shape), "float32")}, {},
                             network)
    if not os.path.isfile(network):
        raise ValueError(f"{network}: no such ONNX file")
    by_name = {s.name: s for s in specs}
    net, params = graph.from_onnx(network, {s.name: s.shape for s in specs})
    inputs = {p.name: (tuple(p.shape), p.dtype) for p in net.params if p.name not in params}
    for s in specs:
        if s.dtype is not None and s.dtype != inputs[s.name][1]:
            raise ValueError(f"--input {s.name}: dtype {s.dtype}, but the model's input "
                             f"{s.name!r} is {inputs[s.name][1]}")
    ranges = {n: (by_name[n].low, by_name[n].high) for n in inputs if n in by_name}
    return LoadedNetwork(net, params, inputs, ranges, os.path.basename(network))


def relative_error(out: np.ndarray, ref: np.ndarray) -> float:
    """The largest difference as a share of the largest reference value."""
    out = np.asarray(out, dtype=np.float64)
    ref = np.asarray(ref, dtype=np.float64)
    return float(np.abs(out - ref).max() / max(float(np.abs(ref).max()), 1e-30))
