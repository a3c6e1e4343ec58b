"""ONNX functions for the importer: a model's local functions (what the dynamo exporter
writes for some modules) are inlined before import, and a node of a standard operator that
has no converter here but a function body in ONNX's schema (``Shrink``, ``Softsign``,
``MeanVarianceNormalization``, ``Attention`` ...) is replaced by the nodes of that body, so
it imports through the operators it is defined with.
"""

from __future__ import annotations

import itertools

_counter = itertools.count()


def inline_local_functions(model):
    """``model`` with every call of one of its local functions replaced by the function's
    nodes (recursively); a model without functions is returned as it is."""
    if not model.functions:
        return model
    from onnx import inliner

    return inliner.inline_local_functions(model)


def function_body(node, opset: int, input_types: list | None):
    """``(nodes, body_opset)``: the nodes defining ``node`` (an operator of the default
    domain) by its schema's function body at ``opset``, wired to the node's inputs and
    outputs, and the opset they are written in; None when the schema has no body.
    ``input_types``: the ``onnx.TypeProto`` of each input (some bodies depend on them),
    None where unknown."""
    import onnx
    from onnx import defs

    try:
        schema = defs.get_schema(node.op_type, opset, node.domain or "")
    except Exception:  # noqa: BLE001 - SchemaError: no such operator at this opset
        return None
    node = _with_defaults(node, schema)
    fn = None
    plain = _version_at(schema.function_opset_versions, opset)
    dependent = _version_at(schema.context_dependent_function_opset_versions, opset)
    if schema.has_function and plain is not None:
        fn = onnx.FunctionProto()
        fn.ParseFromString(schema.get_function_with_opset_version(plain))
    elif schema.has_function:
        fn = schema.function_body
    elif dependent is not None and input_types is not None and all(
            t is not None or not name for t, name in zip(input_types, node.input)):
        # an optional input left out ('') has no type: an empty TypeProto says so
        data = schema.get_context_dependent_function_with_opset_version(
            dependent, node.SerializeToString(),
            [(t or onnx.TypeProto()).SerializeToString() for t in input_types])
        if data:
            fn = onnx.FunctionProto()
            fn.ParseFromString(data)
    if fn is None or not fn.node:
        return None
    body_opset = next((o.version for o in fn.opset_import if o.domain in ("", "ai.onnx")),
                      opset)
    return _instantiate(fn, node), body_opset


def _version_at(versions, opset: int):
    """The newest of a body's ``versions`` that an ``opset`` model may use."""
    usable = [v for v in versions if v <= opset]
    return max(usable) if usable else None


def _with_defaults(node, schema):
    """``node`` with the attributes it leaves out set to the schema's defaults: a body
    refers to them by name and would otherwise fall back to its inner operators' defaults,
    which differ."""
    have = {a.name for a in node.attribute}
    missing = [a for name, a in schema.attributes.items()
               if name not in have and a.default_value is not None
               and a.default_value.name]
    if not missing:
        return node
    import onnx

    out = onnx.NodeProto()
    out.CopyFrom(node)
    for a in missing:
        out.attribute.append(a.default_value)
    return out


def _instantiate(fn, node) -> list:
    """The body of function ``fn`` as nodes of the caller: formal inputs and outputs renamed
    to the node's, inner values to fresh names, attribute references resolved."""

    prefix = f"{node.name or node.output[0]}/{node.op_type}{next(_counter)}/"
    rename = {"": ""}
    for formal, actual in zip(fn.input, node.input):
        rename[formal] = actual
    for formal in fn.input[len(node.input):]:
        rename[formal] = ""  # an optional input the caller leaves out
    for formal, actual in zip(fn.output, node.output):
        rename[formal] = actual or prefix + formal
    attrs = {a.name: a for a in node.attribute}
    return [_renamed_node(inner, rename, prefix, attrs) for inner in fn.node]


def _name(rename: dict, prefix: str, value: str) -> str:
    return rename.setdefault(value, prefix + value) if value else ""


def _renamed_node(inner, rename: dict, prefix: str, attrs: dict):
    """Function-body node ``inner`` with its values renamed (``rename``, else ``prefix`` +
    name), attribute references resolved from the caller's ``attrs``, and the same done
    inside its subgraphs (an ``If``'s branches use the body's values by name)."""
    import onnx

    new = onnx.NodeProto()
    new.CopyFrom(inner)
    new.name = prefix + (inner.name or inner.output[0])
    del new.input[:]
    new.input.extend(_name(rename, prefix, i) for i in inner.input)
    del new.output[:]
    new.output.extend(_name(rename, prefix, o) for o in inner.output)
    del new.attribute[:]
    for a in inner.attribute:
        if a.ref_attr_name:
            if a.ref_attr_name in attrs:
                ref = onnx.AttributeProto()
                ref.CopyFrom(attrs[a.ref_attr_name])
                ref.name = a.name
                new.attribute.append(ref)
            continue
        if a.type == onnx.AttributeProto.GRAPH:
            a = _with_graph(a, _renamed_graph(a.g, rename, prefix, attrs))
        elif a.type == onnx.AttributeProto.GRAPHS:
            graphs = [_renamed_graph(g, rename, prefix, attrs) for g in a.graphs]
            a = _with_graph(a, None, graphs)
        new.attribute.append(a)
    return new


def _renamed_graph(g, rename: dict, prefix: str, attrs: dict):
    import onnx

    out = onnx.GraphProto()
    out.CopyFrom(g)
    for vi in list(out.input) + list(out.output) + list(out.value_info):
        vi.name = _name(rename, prefix, vi.name)
    for init in out.initializer:
        init.name = _name(rename, prefix, init.name)
    del out.node[:]
    out.node.extend(_renamed_node(n, rename, prefix, attrs) for n in g.node)
    return out


def _with_graph(a, g=None, graphs=None):
    import onnx

    new = onnx.AttributeProto()
    new.CopyFrom(a)
    if g is not None:
        new.g.CopyFrom(g)
    if graphs is not None:
        del new.graphs[:]
        new.graphs.extend(graphs)
    return new
