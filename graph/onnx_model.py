"""The model side of the ONNX importer: its error type, the element types it maps, reading
and checking a file, the graph inputs (shapes and dtypes), and which values the outputs
need."""

from __future__ import annotations

from .ir import GraphError, Var, check_shape

ONNX_DTYPES = {1: "float32", 2: "uint8", 3: "int8", 4: "uint16", 5: "int16", 6: "int32",
               7: "int64", 9: "bool", 10: "float16", 11: "float64", 12: "uint32",
               13: "uint64", 16: "bfloat16", 17: "float8_e4m3fn", 19: "float8_e5m2"}
"""ONNX element types by number, as graph dtypes (the others: strings, complex numbers,
the fnuz and e8m0 8-bit floats, 4-bit and 2-bit types, are refused with their name)."""


class OnnxImportError(GraphError):
    """An ONNX model this importer cannot read or translate: a file that cannot be read or
    parsed, a model the ONNX checker rejects, or a node it cannot translate (the message
    names the file and the node)."""

    def prefixed(self, prefix: str) -> OnnxImportError:
        """The same error (same class and attributes) with ``prefix`` before its message."""
        import copy

        new = copy.copy(self)
        new.args = (f"{prefix}{self}",)
        return new


class OnnxDataDependentError(OnnxImportError):
    """An operand that must be known at import time (a shape, axes, bounds ...) depends on
    the data of graph inputs, named in ``inputs``. ``from_onnx(..., constants={name:
    value})`` imports the model for given values of those inputs."""

    def __init__(self, message: str, inputs: tuple = ()):
        super().__init__(message)
        self.inputs = tuple(inputs)


def needed_values(graph) -> set:
    """The names of the values the graph's outputs depend on."""
    producer = {o: n for n in graph.node for o in n.output if o}
    needed, stack = set(), [o.name for o in graph.output]
    while stack:
        v = stack.pop()
        if v in needed:
            continue
        needed.add(v)
        node = producer.get(v)
        if node is not None:
            stack.extend(i for i in node.input if i)
            stack.extend(subgraph_inputs(node))
    return needed


def subgraph_inputs(node) -> list:
    """Outer values a node's subgraphs (If / Loop / Scan bodies) read."""
    out = []
    for a in node.attribute:
        for g in list(a.graphs) + ([a.g] if a.HasField("g") else []):
            for n in g.node:
                out.extend(i for i in n.input if i)
    return out


def input_var(inp, given, default_dtype: str) -> Var:
    """The graph input of ONNX input ``inp``: its dtype as the model says (int64 token ids
    and bool masks stay integer and bool), its shape from the model or ``given``."""
    from onnx import TensorProto

    if not inp.type.HasField("tensor_type"):
        kind = inp.type.WhichOneof("value")
        raise OnnxImportError(f"input {inp.name!r} is a {kind}, not a tensor; only tensor "
                              "inputs are supported")
    ttype = inp.type.tensor_type
    if ttype.elem_type and ttype.elem_type not in ONNX_DTYPES:
        raise OnnxImportError(
            f"input {inp.name!r} has element type "
            f"{TensorProto.DataType.Name(ttype.elem_type)}, which is not supported; "
            f"supported: {', '.join(sorted(set(ONNX_DTYPES.values())))}")
    in_dtype = ONNX_DTYPES.get(ttype.elem_type, default_dtype)
    declared = ([d.dim_value if d.HasField("dim_value") else (d.dim_param or None)
                 for d in ttype.shape.dim] if ttype.HasField("shape") else None)
    if given is None:
        if declared is None or any(not isinstance(d, int) or d <= 0 for d in declared):
            what = "no shape" if declared is None else f"dynamic dimensions {declared}"
            raise OnnxImportError(
                f"input {inp.name!r} has {what}; give its shape in shape_dict, e.g. "
                f"shape_dict={{{inp.name!r}: (1, 128)}} (ptxforge compiles static shapes)")
        return Var(inp.name, tuple(declared), in_dtype)
    try:
        # int() would truncate a 1.5 to 1; check_shape names the bad extent instead.
        shape = check_shape(given, f"shape_dict[{inp.name!r}]")
    except GraphError as e:
        raise OnnxImportError(str(e)) from None
    if declared is not None:
        clash = len(declared) != len(shape) or any(
            isinstance(d, int) and d > 0 and d != s for d, s in zip(declared, shape))
        if clash:
            raise OnnxImportError(f"shape_dict[{inp.name!r}] = {list(shape)} does not fit "
                                  f"the model's declared shape {declared}")
    return Var(inp.name, shape, in_dtype)


def load(onnx, path: str):
    try:
        return onnx.load(path)
    except OSError as e:
        raise OnnxImportError(f"{path}: cannot read the model ({e.strerror or e})") from e
    except Exception as e:  # noqa: BLE001 - protobuf's DecodeError and friends
        raise OnnxImportError(f"{path}: not a readable ONNX model, truncated or corrupt "
                              f"({type(e).__name__}: {e})") from e


def check(onnx, model, source: str, prefix: str) -> None:
    """Reject what the ONNX checker rejects, and a model that declares no opset (a file cut
    short can parse as one: it must not be imported as some default opset)."""
    if not model.opset_import or not model.HasField("graph"):
        what = "a truncated or corrupt file?" if source else "an incomplete ModelProto"
        raise OnnxImportError(f"{prefix}the model has no graph or declares no opset ({what})")
    try:
        onnx.checker.check_model(source if source else model)
    except Exception as e:  # noqa: BLE001 - ValidationError, or protobuf on a bad file
        first = str(e).strip().splitlines()
        raise OnnxImportError(f"{prefix}the ONNX checker rejects the model: "
                              f"{' '.join(x.strip() for x in first[:4])}") from e
