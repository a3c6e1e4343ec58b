"""``ptxforge inspect MODEL``: what a network (an ONNX file or a zoo name) becomes: its
inputs and outputs with dtypes, the operators of the imported graph, the fused functions
the build compiles (with their workload keys, the tuning tasks), and with ``--graph`` the
graph itself."""

from __future__ import annotations

import collections


def inspect_network_command(args) -> int:
    from .. import graph
    from .network_source import is_model_file, load_network

    try:
        loaded = load_network(args.model, args.input)
    except (ValueError, graph.GraphError) as e:
        raise SystemExit(str(e)) from None
    net, params = loaded.net, loaded.params
    print(f"{loaded.label}: {len(params)} weights, "
          f"{sum(v.size for v in params.values()):,} values")
    for name, (shape, dtype) in loaded.inputs.items():
        print(f"  input  {name}: {list(shape)} {dtype}")
    for k, out in enumerate(net.outputs):
        print(f"  output {k}: {list(out.shape)} {out.dtype}")
    ops = collections.Counter(c.op_name for c in net.calls())
    print("operators: " + ", ".join(f"{op} x{n}" for op, n in sorted(ops.items())))
    if args.graph:
        print(net)
    layout = args.layout if is_model_file(args.model) else None
    funcs = graph.extract_fused_functions(net, params, layout=layout, precision=args.dtype)
    kernels = [f for f in funcs if not f.is_view]
    print(f"{len(kernels)} distinct fused functions ({args.dtype}), "
          f"{sum(f.count for f in kernels)} kernel launches:")
    for f in kernels:
        print(f"  {f.count:3d} x {f.name}  {f.workload_key}")
    return 0
