"""The network executor lives in :mod:`ptxforge.runtime.graph_executor` (it runs built and
loaded networks alike, without the compiler); its names are also the graph layer's."""

from ..runtime.graph_executor import BenchmarkResult, GraphModule

__all__ = ["BenchmarkResult", "GraphModule"]
