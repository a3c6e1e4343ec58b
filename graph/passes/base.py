"""Graph passes: passes over :class:`~ptxforge.graph.ir.Graph`, run like the tensor-level ones.

A graph pass is a frozen dataclass deriving from :class:`GraphPass` (itself a
:class:`ptxforge.passes.Pass`, so it has the same text form, typed parameters and checks),
registered in :data:`GRAPH_PASSES`. :class:`GraphPipeline` runs a list of them through a
:class:`GraphPassContext`, whose options mirror :class:`ptxforge.passes.PassContext`:
print the graph before/after passes, dump every stage to a folder, time the passes, and
verify each pass's output (re-inferring every type; on by default)::

    with GraphPassContext(print_after="all", dump_dir="dump"):
        net = GraphPipeline.parse("simplify_inference, fold_constant, fuse_ops")(net)
"""

from __future__ import annotations

import contextvars
import os
import warnings
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import IO, Any

from ...passes import Pass, PassError, Pipeline, register_pass
from ...passes.context import InstrumentedContext
from ...passes.instruments import DumpIR, PassInstrument, PassTiming, PrintAfter, PrintBefore
from ...passes.registry import PassRegistry
from ..ir import Graph

GRAPH_PASSES = PassRegistry(builtin_packages=("ptxforge.graph.passes",))
"""The registry of graph passes (separate from the tensor-level passes)."""


def register_graph_pass(cls: type | None = None, *, override: bool = False):
    """Class decorator registering a graph pass in :data:`GRAPH_PASSES`."""
    return register_pass(cls, override=override, registry=GRAPH_PASSES)


@dataclass(frozen=True)
class GraphPass(Pass):
    """Base of graph passes: ``apply(graph, ctx) -> graph``."""

    def __call__(self, graph: Graph, ctx: GraphPassContext | None = None) -> Graph:  # type: ignore[override]
        return (ctx if ctx is not None else GraphPassContext.current()).run_pass(self, graph)

    def __add__(self, other: Any) -> GraphPipeline:  # type: ignore[override]
        return GraphPipeline([self]) + other


class GraphPipeline:
    """An ordered list of graph passes with a text form (``fold_constant, fuse_ops``)."""

    def __init__(self, passes: Iterable[Pass] = ()):
        self.passes = tuple(passes)
        for p in self.passes:
            if not isinstance(p, GraphPass):
                raise TypeError(f"{p!r} is not a graph pass")

    @classmethod
    def parse(cls, text: str) -> GraphPipeline:
        """Read pipeline text naming registered graph passes."""
        return cls(Pipeline.parse(text, registry=GRAPH_PASSES).passes)

    @property
    def text(self) -> str:
        return ", ".join(p.text for p in self.passes)

    def __str__(self) -> str:
        return self.text

    def __repr__(self) -> str:
        return f"GraphPipeline.parse({self.text!r})"

    def __len__(self) -> int:
        return len(self.passes)

    def __iter__(self):
        return iter(self.passes)

    def __add__(self, other: Any) -> GraphPipeline:
        if isinstance(other, GraphPipeline):
            return GraphPipeline(self.passes + other.passes)
        if isinstance(other, GraphPass):
            return GraphPipeline(self.passes + (other,))
        if isinstance(other, (list, tuple)):
            return GraphPipeline(self.passes + tuple(other))
        return NotImplemented

    def __call__(self, graph: Graph, ctx: GraphPassContext | None = None) -> Graph:
        ctx = ctx if ctx is not None else GraphPassContext.current()
        with ctx:
            for p in self.passes:
                graph = ctx.run_pass(p, graph)
        return graph


class GraphVerify(PassInstrument):
    """Check each graph pass's output: every var is a parameter, every type re-infers."""

    def run_after_pass(self, pass_, module_before, module_after) -> None:
        try:
            module_after.check()
        except Exception as e:
            raise PassError(pass_, e, module_after) from e


def _warn_unknown(names, matched, what: str) -> None:
    if names is None:
        return
    for name in sorted(set(names) - matched):
        if name not in GRAPH_PASSES:
            warnings.warn(f"{what} names no known graph pass: {name!r}; graph passes are "
                          f"{', '.join(GRAPH_PASSES.names())}", stacklevel=4)


class _GraphPrintBefore(PrintBefore):
    def exit_ctx(self, ctx) -> None:
        _warn_unknown(self.select.names, self.select.matched, "print_before")


class _GraphPrintAfter(PrintAfter):
    def exit_ctx(self, ctx) -> None:
        self._last = None
        _warn_unknown(self.select.names, self.select.matched, "print_after")


_ACTIVE: contextvars.ContextVar[tuple] = contextvars.ContextVar("ptxforge_graph_contexts",
                                                               default=())

Selection = None | bool | str | Iterable[str]


class GraphPassContext(InstrumentedContext):
    """Configuration and instruments for graph passes (see the module doc).

    Parameters:
        instruments: extra :class:`~ptxforge.passes.instruments.PassInstrument` objects.
        verify: check every pass's output (on by default).
        config: options passes read, such as ``{"winograd": True}``.
        print_before / print_after: ``"all"`` or pass names.
        print_after_change: print after a pass only when the printed graph changed.
        time_passes: print a timing summary when the context is left.
        dump_dir: write the graph after every pass into this folder.
        stream: where printing goes (default ``sys.stdout``).
    """

    _active = _ACTIVE
    _ir_type = Graph
    _returns = "a graph pass returns a Graph"
    _passthrough = (PassError,)  # a nested pipeline's error already names its pass

    def __init__(self, instruments: Sequence[PassInstrument] = (), *, verify: bool = True,
                 config: dict | None = None, print_before: Selection = None,
                 print_after: Selection = None, print_after_change: bool = False,
                 time_passes: bool = False, dump_dir: str | os.PathLike | None = None,
                 stream: IO[str] | None = None):
        self.config = dict(config or {})
        built: list[PassInstrument] = []
        if verify:
            built.append(GraphVerify())
        if print_before not in (None, False):
            built.append(_GraphPrintBefore(print_before, stream=stream))
        if print_after not in (None, False):
            built.append(_GraphPrintAfter(print_after, only_changed=print_after_change,
                                          stream=stream))
        elif print_after_change:
            built.append(_GraphPrintAfter("all", only_changed=True, stream=stream))
        if dump_dir is not None:
            built.append(DumpIR(dump_dir))
        built.extend(instruments)
        if time_passes:
            built.append(PassTiming(report=True, stream=stream))
        self._start(built)

    def run_pass(self, pass_: GraphPass, graph: Graph) -> Graph:
        """Run one pass with this context's instruments; failures become
        :class:`~ptxforge.passes.errors.PassError` naming the pass."""
        if not isinstance(pass_, GraphPass):
            raise TypeError(f"run_pass needs a graph pass, got {pass_!r}")
        if not isinstance(graph, Graph):
            raise TypeError(f"graph pass {pass_.text} needs a Graph, got {type(graph).__name__}")
        return self._run_instrumented(pass_, graph)
