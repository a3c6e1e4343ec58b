"""ONNX ``If`` with a condition known at import: the taken branch's nodes are imported in
place of the node (function bodies such as ``AffineGrid``'s branch on an attribute or a
shape). A condition computed from the data of graph inputs is an ``OnnxDataDependentError``
naming them: the graph has no control flow, and both branches' outputs may differ in shape.
"""

from __future__ import annotations

import numpy as np

from ..frontend_onnx import OnnxImportError, register_converter


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
