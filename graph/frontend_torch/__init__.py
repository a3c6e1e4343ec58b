"""The PyTorch front end: ``torch.export`` programs (and the graphs ``torch.compile``
captures) translated into the graph IR, one converter per ATen overload.

::

    net, params = graph.from_torch(model.eval(), (x,))
    lib = graph.build(net, target="cuda", params=params)

Supported operators: :func:`coverage` (``docs/torch.md`` holds the table for the installed
torch); anything else is a :class:`TorchImportError` naming the operator and its source line.
"""

from .api import decomposition_table, from_exported_program, from_torch
from .core_aten import core_aten_overloads, coverage, coverage_markdown
from .importer import SymbolicShapeWarning, TorchImportError, graph_dtype, import_graph
from .registry import CONVERTERS, Converter, lookup

__all__ = [
    "CONVERTERS", "Converter", "SymbolicShapeWarning", "TorchImportError", "core_aten_overloads",
    "coverage", "coverage_markdown", "decomposition_table", "from_exported_program",
    "from_torch", "graph_dtype", "import_graph", "lookup",
]
