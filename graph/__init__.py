"""The network layer (``ptxforge.graph``): graph IR, model zoo, ONNX import, graph passes,
fused-function extraction, build and execution.

The flow of TVM's "auto-scheduling a neural network" tutorial::

    from ptxforge import graph
    net, params, input_shape, output_shape = graph.get_network("resnet-18", batch_size=1,
                                                               layout="NHWC")
    for f in graph.extract_fused_functions(net, params):
        print(f.name, f.count, f.workload_key)
    lib = graph.build(net, target="cuda", params=params)
    module = graph.GraphModule(lib, ptxforge.cuda(0))
    module.set_input("data", data)
    module.run()
    out = module.get_output(0).numpy()
    print(module.benchmark(ptxforge.cuda(0), repeat=3, min_repeat_ms=500))

Graphs are built from :func:`var`, :func:`const` and the operator constructors (``nn.conv2d``,
``add``, ...; see :mod:`ptxforge.graph.nn`), printed in a Relay-like text form, and evaluated
op by op in numpy by :func:`evaluate` (the reference for everything compiled).
"""

from . import nn, opdefs, passes
from .build_module import (
    CompiledFunction,
    GraphLibrary,
    NoTuningRecordWarning,
    build,
    default_schedule_for,
    optimize,
    simple_schedule,
)
from .executor import BenchmarkResult, GraphModule
from .frontend_onnx import OnnxImportError, from_onnx
from .frontend_torch import TorchImportError, from_exported_program, from_torch
from .fused import FusedFunction, extract_fused_functions, lower_function
from .interpreter import evaluate, run_graph
from .ir import (
    Call,
    Constant,
    Graph,
    GraphError,
    Node,
    TensorType,
    Var,
    bind_params,
    graph_from_outputs,
)
from .memory_plan import MemoryPlan, plan_memory
from .op import OpDef, OpPattern, get_op, list_ops, register_op
from .opdefs import (
    add,
    cast,
    clip,
    concatenate,
    divide,
    erf,
    exp,
    expand_dims,
    log,
    maximum,
    mean,
    minimum,
    multiply,
    negative,
    power,
    reshape,
    rsqrt,
    sigmoid,
    sqrt,
    squeeze,
    strided_slice,
    subtract,
    tanh,
    transpose,
)
from .passes import PRECISIONS, GraphPassContext, GraphPipeline
from .zoo import get_network, list_networks


def load(path):
    """A network written by ``lib.export_library(path)``: run it with
    ``GraphModule(graph.load(path), dev)`` (this is :func:`ptxforge.runtime.load_module`,
    which a process without the compiler can import on its own)."""
    from ..runtime import LoadedNetwork, ModuleFormatError, load_module

    got = load_module(path)
    if not isinstance(got, LoadedNetwork):
        raise ModuleFormatError(f"{path} holds a kernel module, not a network; load it with "
                                "ptxforge.runtime.load_module")
    return got


def var(name: str, shape, dtype: str = "float32") -> Var:
    """A graph parameter (network input or weight)."""
    return Var(name, shape, dtype)


def const(value, name: str = "", dtype: str | None = None) -> Constant:
    """A constant tensor (numpy array or number)."""
    return Constant(value, name, dtype)


def function(outputs, inputs=None, name: str = "main") -> Graph:
    """A graph over ``outputs`` (a node or a list) whose params are ``inputs`` (default:
    every var the outputs use, in order of first use)."""
    return graph_from_outputs(outputs, name, inputs)


__all__ = [
    "BenchmarkResult", "Call", "CompiledFunction", "Constant", "FusedFunction", "Graph",
    "GraphError", "GraphLibrary", "GraphModule", "GraphPassContext", "GraphPipeline",
    "OnnxImportError", "PRECISIONS", "TorchImportError", "from_exported_program", "from_torch",
    "MemoryPlan", "Node", "NoTuningRecordWarning", "OpDef", "OpPattern", "TensorType", "Var",
    "add", "bind_params", "build", "cast", "clip", "concatenate", "const", "default_schedule_for",
    "divide", "erf", "evaluate", "exp", "expand_dims", "extract_fused_functions",
    "from_onnx", "function", "get_network", "get_op", "graph_from_outputs", "list_networks",
    "list_ops", "load", "log", "lower_function", "maximum", "mean", "minimum", "multiply",
    "negative", "nn", "opdefs", "optimize", "passes", "plan_memory", "power",
    "register_op", "reshape", "rsqrt", "run_graph", "sigmoid", "simple_schedule", "sqrt",
    "squeeze", "strided_slice", "subtract", "tanh", "transpose", "var",
]
