"""``use_tf32``: compute a float32 network's matrix products and convolutions in TF32.

TF32 is never chosen silently (docs/precision.md): this pass is how a network asks for it.
Every float32 ``nn.dense``, ``nn.matmul``, ``nn.batch_matmul`` and dense (``groups=1``)
``nn.conv2d`` gets ``precision="tf32"``: inputs rounded to TF32, products accumulated in
float32, the tensor cores' m16n8k8 tf32 mma where a schedule uses them. Everything else,
and the dtypes of every value, stay as they are.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..ir import Call, Graph, Node, rewrite
from .base import GraphPass, register_graph_pass

TF32_OPS = ("nn.dense", "nn.matmul", "nn.batch_matmul", "nn.conv2d")


@register_graph_pass
@dataclass(frozen=True)
class UseTF32(GraphPass):
    """Mark the float32 matrix products and dense convolutions ``precision="tf32"``."""

    name = "use_tf32"

    def apply(self, graph: Graph, ctx) -> Graph:
        def mark(call: Call, args: tuple) -> Node | None:
            if (isinstance(call.op, str) and call.op in TF32_OPS
                    and args[0].dtype == "float32" and call.attrs.get("groups", 1) == 1
                    and call.attrs["precision"] != "tf32"):
                return Call(call.op, args, {**call.attrs, "precision": "tf32"})
            return None

        return rewrite(graph, mark)
