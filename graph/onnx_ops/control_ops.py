"""ONNX ``If`` with a condition known at import: the taken branch's nodes are imported in
place of the node (function bodies such as ``AffineGrid``'s branch on an attribute or a
shape). A condition computed from the data of graph inputs is an ``OnnxDataDependentError``
naming them: the graph has no control flow, and both branches' outputs may differ in shape.
"""

from __future__ import annotations

import numpy as np

from ..frontend_onnx import OnnxImportError, register_converter
from ..ir import Constant


@register_converter("If")
def _if(im, node, a):
    cond = np.asarray(im.value(node.input[0], "If's condition (the graph has no control "
                                              "flow: the branch is chosen at import)"))
    if cond.size != 1:
        raise OnnxImportError(f"If {node.name!r}: the condition has {cond.size} elements; "
                              "it must have one")
    branch = a["then_branch"] if bool(cond.reshape(())) else a["else_branch"]
    if len(branch.output) != len(node.output):
        raise OnnxImportError(f"If {node.name!r}: the branch {branch.name!r} has "
                              f"{len(branch.output)} outputs, the node {len(node.output)}")
    from onnx import numpy_helper

    for init in branch.initializer:
        im.static[init.name] = numpy_helper.to_array(init)
    for inner in branch.node:
        im._translate_named(inner)
    outs = []
    for outer, o in zip(node.output, branch.output):
        # what the output is computed from: the branch's nodes (for the error naming the
        # graph inputs a value depends on)
        if o.name in im.producer:
            im.producer[outer] = im.producer[o.name]
        if o.name not in im.nodes and o.name not in im.static:
            raise OnnxImportError(f"If {node.name!r}: the branch output {o.name!r} is "
                                  "computed by no node")
        if im.is_static(o.name):
            im.static[outer] = im.static[o.name]  # known at import, as the branch's value
        outs.append(im.tensor(o.name))
    return outs


# -- Scan ------------------------------------------------------------------------------------


def _names_used(g) -> tuple[set, set]:
    """``(defined, referenced)`` value names of graph ``g`` and its subgraphs."""
    import onnx

    defined = {v.name for v in g.input} | {i.name for i in g.initializer}
    used = {v.name for v in g.output}
    for n in g.node:
        defined.update(o for o in n.output if o)
        used.update(i for i in n.input if i)
        for a in n.attribute:
            subs = [a.g] if a.type == onnx.AttributeProto.GRAPH else list(a.graphs)
            for sub in subs:
                d, u = _names_used(sub)
                defined |= d
                used |= u
    return defined, used


def _import_body(im, body, inputs: list, prefix: str) -> list:
    """Import the nodes of graph ``body`` once, its inputs bound to the graph nodes
    ``inputs`` and every value it defines renamed with ``prefix`` (values of the enclosing
    scope keep their names); returns its output nodes."""
    from .. import onnx_functions
    from ..frontend_onnx import OnnxImportError as _Err

    defined, used = _names_used(body)
    rename = {"": ""}
    rename.update({n: n for n in used - defined})
    for v, node in zip(body.input, inputs):
        rename[v.name] = prefix + v.name
        im.nodes[prefix + v.name] = node
        if isinstance(node, Constant):  # known at import: later nodes may evaluate on it
            im.static[prefix + v.name] = node.value
    from onnx import numpy_helper

    for init in body.initializer:
        im.static[prefix + init.name] = numpy_helper.to_array(init)
    for inner in body.node:
        im._translate_named(onnx_functions._renamed_node(inner, rename, prefix, {}))
    outs = []
    for o in body.output:
        name = rename.get(o.name, prefix + o.name)
        if name not in im.nodes and name not in im.static:
            raise _Err(f"the body output {o.name!r} is computed by no node")
        outs.append(im.tensor(name))
    return outs


def _take(x, index: int, axis: int):
    """``x``'s slice ``index`` along ``axis``, without that axis."""
    from .. import opdefs as G
    from ..ir import Call

    part = Call("strided_slice", [x], {"begin": [index], "end": [index + 1], "axes": [axis]})
    return G.reshape(part, [s for d, s in enumerate(x.shape) if d != axis])


def _stack(parts: list, axis: int):
    from .. import opdefs as G

    shape = list(parts[0].shape)
    shape.insert(axis, 1)
    return G.concatenate([G.reshape(p, shape) for p in parts], axis)


def _scan_once(im, node, a, states: list, scans: list, prefix: str) -> tuple[list, list]:
    """One Scan over the scan inputs ``scans`` from ``states`` (opset 9 semantics), unrolled:
    ``(final states, scan outputs)``."""
    body = a["body"]
    m = len(scans)
    axes = [int(v) for v in a.get("scan_input_axes", [0] * m)]
    dirs = [int(v) for v in a.get("scan_input_directions", [0] * m)]
    axes = [ax % max(x.ndim, 1) for ax, x in zip(axes, scans)]
    lengths = {x.shape[ax] for x, ax in zip(scans, axes)}
    if len(lengths) != 1:
        raise OnnxImportError(f"Scan {node.name!r}: the scan inputs have different lengths "
                              f"{sorted(lengths)} along their scan axes")
    (steps,) = lengths
    k = len(body.output) - len(states)
    if steps == 0:
        raise OnnxImportError(f"Scan {node.name!r}: the scan inputs are empty; empty tensors "
                              "are not supported")
    per_step: list[list] = [[] for _ in range(k)]
    for t in range(steps):
        sliced = [_take(x, steps - 1 - t if d else t, ax) for x, ax, d in zip(scans, axes, dirs)]
        outs = _import_body(im, body, states + sliced, f"{prefix}/iter{t}/")
        states = outs[:len(states)]
        for j in range(k):
            per_step[j].append(outs[len(states) + j])
    out_axes = [int(v) for v in a.get("scan_output_axes", [0] * k)]
    out_dirs = [int(v) for v in a.get("scan_output_directions", [0] * k)]
    stacked = []
    for j in range(k):
        parts = per_step[j][::-1] if out_dirs[j] else per_step[j]
        axis = out_axes[j] % (parts[0].ndim + 1)
        stacked.append(_stack(parts, axis))
    return states, stacked


@register_converter("Scan")
def _scan(im, node, a):
    """``Scan`` unrolled over its static number of steps (the body imported once per step);
    opset 8's batched form runs one scan per batch element (without ``sequence_lens``)."""
    name = node.name or node.output[0]
    n_scan = int(a["num_scan_inputs"])
    if im.opset >= 9:
        ins = [im.tensor(i) for i in node.input]
        states, outs = _scan_once(im, node, a, ins[:len(ins) - n_scan], ins[len(ins) - n_scan:],
                                  name)
        return states + outs
    if node.input[0]:
        raise OnnxImportError(f"Scan {node.name!r}: opset 8's sequence_lens is not supported "
                              "(every sequence runs its full length)")
    ins = [im.tensor(i) for i in node.input[1:]]
    n_state = len(ins) - n_scan
    batch = ins[0].shape[0]
    a9 = dict(a)
    a9["scan_input_axes"] = [0] * n_scan  # after the batch axis is taken out
    a9["scan_input_directions"] = [int(v) for v in a.get("directions", [0] * n_scan)]
    results = []
    for b in range(batch):
        states, outs = _scan_once(im, node, a9, [_take(x, b, 0) for x in ins[:n_state]],
                                  [_take(x, b, 0) for x in ins[n_state:]], f"{name}/b{b}")
        results.append(states + outs)
    return [_stack([r[j] for r in results], 0) for j in range(len(results[0]))]


# -- Loop ------------------------------------------------------------------------------------

MAX_LOOP_STEPS = 1024
"""The most iterations a ``Loop`` is unrolled to (each imports its body once)."""


@register_converter("Loop")
def _loop(im, node, a):
    """``Loop`` unrolled: its trip count and its condition (given, and as each iteration
    computes it) must be known at import; the loop-carried values and scan outputs are the
    body's, iteration after iteration."""
    name = node.name or node.output[0]
    why = "(the graph has no control flow: a Loop is unrolled at import)"
    trips = (int(np.asarray(im.value(node.input[0], f"Loop's trip count {why}")).reshape(()))
             if node.input[0] else None)
    cond = (bool(np.asarray(im.value(node.input[1], f"Loop's condition {why}")).reshape(()))
            if len(node.input) > 1 and node.input[1] else True)
    if trips is None and not (len(node.input) > 1 and node.input[1]):
        raise OnnxImportError(f"Loop {node.name!r}: neither a trip count nor a condition; "
                              "the loop would not end")
    carried = [im.tensor(i) for i in node.input[2:]]
    body = a["body"]
    n_scan = len(body.output) - 1 - len(carried)
    scans: list[list] = [[] for _ in range(n_scan)]
    step = 0
    while cond and (trips is None or step < trips):
        if step == MAX_LOOP_STEPS:
            raise OnnxImportError(f"Loop {node.name!r}: more than {MAX_LOOP_STEPS} "
                                  "iterations; longer loops are not unrolled")
        outs = _import_body(im, body, [Constant(np.array(step, np.int64), "", "int64"),
                                       Constant(np.array(cond), "", "bool")] + carried,
                            f"{name}/iter{step}/")
        if not isinstance(outs[0], Constant):
            raise OnnxImportError(f"Loop {node.name!r}: the body's condition depends on "
                                  f"tensor data {why}")
        cond = bool(outs[0].value.reshape(()))
        carried = outs[1:1 + len(carried)]
        for j in range(n_scan):
            scans[j].append(outs[1 + len(carried) + j])
        step += 1
    if n_scan and step == 0:
        raise OnnxImportError(f"Loop {node.name!r}: no iteration runs, so its scan outputs "
                              "are empty; empty tensors are not supported")
    return carried + [_stack(parts, 0) for parts in scans]
