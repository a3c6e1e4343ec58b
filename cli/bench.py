"""``ptxforge bench op`` and ``ptxforge bench network``: a tuned result against PyTorch on
the GPU, in the same process.

``bench op`` times the best record of a convolution (or dense) workload of a record file
against cuDNN (cuBLAS for dense) through PyTorch; both sides are CUDA-graph timed (``number``
launches captured in one graph, replayed ``repeat`` times between CUDA events), TF32 off and
``cudnn.benchmark`` on, and both results are checked against numpy (float64) first.
``bench network`` builds a zoo network from its records and compares it with PyTorch (eager
and CUDA graph) for ``resnet_v1-*``, torchvision's ResNet on the same weights, in the
precision ``--dtype`` gives (float32, or float16 / bfloat16 mixed precision, or TF32) on both
sides.
"""

from __future__ import annotations

import argparse
import json
import statistics

import numpy as np

from .progress import logger
from .tune import (
    BUILTIN_WORKLOADS,
    NETWORK_TOLERANCE,
    add_input_argument,
    add_pad_channels_argument,
    gpu_present,
)


def require_gpu_and_torch(what: str, need_torch: bool = True):
    """The ``torch`` module (or None when ``need_torch`` is false); exits with a message
    saying what is missing when there is no GPU or no usable PyTorch."""
    if not gpu_present():
        raise SystemExit(f"{what} needs an NVIDIA GPU: no CUDA device answers here "
                         "(cuInit / cuDeviceGetCount). Tune with --runner sim for estimates, "
                         "and run bench on a machine with a GPU.")
    if not need_torch:
        return None
    try:
        import torch
    except ImportError:
        raise SystemExit(f"{what} compares with PyTorch, which is not importable here; "
                         "install torch with CUDA support (pip install torch)") from None
    if not torch.cuda.is_available():
        raise SystemExit(f"{what}: PyTorch {torch.__version__} sees no CUDA device (a CPU-only "
                         "build?); install a CUDA build of torch")
    return torch


# -- bench op ---------------------------------------------------------------------------------

_CONV_NAMES = ("conv2d_bias_relu", "conv2d_layer")  # the CLI's/benchmarks' and the tutorial's
_DENSE_NAMES = ("dense_bias",)


def _pick_record(log: str, workload: str | None) -> tuple:
    """``(name, args, key, input, result)`` of the best record of the chosen workload."""
    from ..autosched.workload_registry import decode_workload_key
    from ..measure import best_records
    from ..measure.record import rank

    best = best_records(log)
    known = {}
    for (key, _target), (inp, res) in best.items():
        try:
            name, wl_args = decode_workload_key(key)
        except ValueError:
            continue
        if name in _CONV_NAMES + _DENSE_NAMES:
            if key not in known or rank(res) < rank(known[key][4]):
                known[key] = (name, wl_args, key, inp, res)
    if not known:
        raise SystemExit(f"{log}: no successful record of a convolution or dense workload "
                         f"(workloads {', '.join(n for n in _CONV_NAMES + _DENSE_NAMES)})")
    if workload is not None:
        from .tune import parse_workload

        try:
            func, wl_args = parse_workload(workload)
        except ValueError as e:
            raise SystemExit(str(e)) from None
        want = json.loads(json.dumps([func.__name__, *wl_args]))
        for rec in known.values():
            if json.loads(rec[2])[1:] == want[1:] and rec[0] in (
                    _CONV_NAMES if func.__name__ in _CONV_NAMES else _DENSE_NAMES):
                return rec
        raise SystemExit(f"{log} has no successful record of {workload}; it has "
                         f"{', '.join(known)}")
    if len(known) == 1:
        return next(iter(known.values()))
    seed_args = json.loads(json.dumps(list(BUILTIN_WORKLOADS["seed"][1])))
    for rec in known.values():
        if rec[0] in _CONV_NAMES and json.loads(rec[2])[1:] == seed_args:
            return rec
    raise SystemExit(f"{log} has records of {len(known)} workloads; choose one with "
                     f"--workload ({', '.join(known)})")


def graph_time_torch(torch, fn, number: int, repeat: int) -> float:
    """Median milliseconds per call of ``fn``: ``number`` calls captured in one CUDA graph,
    replayed ``repeat`` times between CUDA events."""
    for _ in range(10):  # warm-up, and cudnn.benchmark's algorithm search
        fn()
    torch.cuda.synchronize()
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(number):
            fn()
    graph.replay()
    torch.cuda.synchronize()
    times = []
    for _ in range(repeat):
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / number)
    return statistics.median(times)


def _check(got: np.ndarray, want: np.ndarray) -> tuple[float, bool]:
    err = float(np.abs(got - want).max())
    ok = bool(np.allclose(got, want, rtol=1e-3, atol=1e-4 * max(1.0, float(np.abs(want).max()))))
    return err, ok


def bench_op_command(args) -> int:
    """The best record of one workload against PyTorch, both CUDA-graph timed."""
    torch = require_gpu_and_torch("bench op")
    import ptxforge
    from ptxforge import autosched
    from ptxforge.backend_ptx import array, compile_module, cuda, empty
    from ptxforge.ops.testing import conv2d_nchw_python

    name, wl_args, key, _, res = _pick_record(args.log, args.workload)
    is_conv = name in _CONV_NAMES
    if name == "conv2d_layer":
        # the tutorial's name for the same computation
        from ptxforge import workloads

        autosched.register_workload(workloads.conv2d_layer, override=True)
    task = autosched.SearchTask(workload_key=key, target="cuda")
    sch, tensors = task.apply_best(args.log)
    dev = cuda(args.device)
    loaded = compile_module(ptxforge.lower(sch, tensors)).load(dev)

    rng = np.random.default_rng(0)
    host = [rng.uniform(-1, 1, tuple(int(d) for d in t.shape)).astype("float32")
            for t in tensors[:-1]]
    h64 = [x.astype(np.float64) for x in host]
    if is_conv:
        stride, pad = tuple(wl_args[7]), tuple(wl_args[8])
        want = np.maximum(conv2d_nchw_python(h64[0], h64[1], stride, pad) + h64[2], 0)
    else:
        want = h64[0] @ h64[1].T + h64[2]
    arrays = [array(x, dev) for x in host]
    out = empty(tuple(int(d) for d in tensors[-1].shape), "float32", dev)
    loaded(*arrays, out)
    ours_err, ours_ok = _check(out.numpy(), want)
    timer = loaded.time_evaluator("main", number=args.number, repeat=args.repeat, graph=True)
    ours_ms = timer(*arrays, out).median * 1e3

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cudnn.benchmark = True
    tx = [torch.from_numpy(x).to(torch.device("cuda", args.device)) for x in host]
    if is_conv:
        b1 = tx[2].reshape(-1)

        def fn():
            return torch.relu(torch.nn.functional.conv2d(tx[0], tx[1], b1, stride, pad))
        lib = f"cuDNN {torch.backends.cudnn.version()}"
    else:
        def fn():
            return torch.nn.functional.linear(tx[0], tx[1], tx[2])
        lib = "cuBLAS"
    with torch.no_grad():
        theirs_err, theirs_ok = _check(fn().cpu().numpy().astype(np.float64), want)
        theirs_ms = graph_time_torch(torch, fn, args.number, args.repeat)

    flop = task.flop_ct
    print(f"device: {dev.name}; workload {key}, {flop / 1e6:.1f} MFLOP; CUDA-graph timed, "
          f"median of {args.repeat} x {args.number}; PyTorch {torch.__version__} ({lib}), "
          "TF32 off")
    est = " (estimated when tuned)" if res.estimated else ""
    print(f"the record: {res.mean * 1e3:.4f} ms when tuned{est}")
    for label, ms, err, ok in (("ptxforge (best record)", ours_ms, ours_err, ours_ok),
                               (f"PyTorch ({lib})", theirs_ms, theirs_err, theirs_ok)):
        status = "ok" if ok else f"WRONG (max err {err:.2e})"
        print(f"  {label:<28} {ms:9.4f} ms  {flop / ms / 1e9:8.2f} TFLOP/s  {status}")
    print(f"PyTorch / ptxforge = {theirs_ms / ours_ms:.2f} (> 1: ptxforge is faster)")
    return 0 if ours_ok and theirs_ok else 1


# -- bench network ----------------------------------------------------------------------------


def bench_network_command(args) -> int:
    """Build a network from its records, check it, time it, and compare with PyTorch."""
    twin = args.network.startswith("resnet_v1-")
    if not twin:
        require_gpu_and_torch("bench network", need_torch=False)
    else:
        require_gpu_and_torch("bench network")
    import ptxforge
    from ptxforge import autosched, graph
    from ptxforge.graph.torch_reference import compare_with_torch

    from .network_source import is_model_file, load_network, relative_error

    try:
        loaded = load_network(args.network, args.input, batch_size=args.batch_size,
                              layout=args.layout, image_size=args.image_size)
    except (ValueError, graph.GraphError) as e:
        raise SystemExit(str(e)) from None
    net, params = loaded.net, loaded.params
    layout = args.layout if is_model_file(args.network) else None
    with autosched.ApplyHistoryBest(args.log):
        lib = graph.build(net, target="cuda", params=params, precision=args.dtype,
                          pad_channels=args.pad_channels, layout=layout)
    tuned = sum(1 for f in lib.functions.values() if f.tuned)
    print(f"{loaded.label} ({args.dtype}): {tuned} of {len(lib.functions)} functions from "
          f"{args.log}")
    if tuned < len(lib.functions):
        logger.warning(f"{len(lib.functions) - tuned} functions have no record in {args.log} "
                       "and use default schedules; tune the network with the same --layout, "
                       "--batch-size, --image-size and --dtype")
    dev = ptxforge.cuda(0)
    module = graph.GraphModule(lib, dev)
    feeds = loaded.random_inputs(0)
    module.set_input(**{k: v for k, v in feeds.items() if k in lib.plan.inputs})
    module.run()
    out = module.get_output(0).numpy()
    refs = graph.run_graph(net, feeds, params)
    err = max(relative_error(module.get_output(k).numpy(), ref) for k, ref in enumerate(refs))
    if err > NETWORK_TOLERANCE[args.dtype]:
        print(f"the compiled network DIFFERS from the numpy reference executor (largest "
              f"difference {err:.2e} of the largest output)")
        return 1
    result = module.benchmark(dev, repeat=3, min_repeat_ms=500)
    print(f"ptxforge: {result}")
    if twin:
        compare_with_torch(argparse.Namespace(network=args.network, layout=args.layout,
                                              dtype=args.dtype),
                           params, feeds["data"], out, result.median)
    else:
        print(f"PyTorch comparison: {args.network} has no PyTorch twin here; tune and bench "
              "resnet_v1-18 (torchvision's ResNet-18) to compare")
    return 0


def add_bench_parser(sub) -> None:
    """The ``bench`` subcommand and its ``op`` and ``network`` forms."""
    b = sub.add_parser("bench", help="a tuned operator or network against PyTorch (GPU)")
    bsub = b.add_subparsers(dest="what", required=True)
    o = bsub.add_parser("op", help="the best record of a conv (or dense) workload vs cuDNN")
    o.add_argument("--log", required=True, help="a record file")
    o.add_argument("--workload", help="which workload of the log (default: the seed layer, "
                                      "or the only one)")
    o.add_argument("--number", type=int, default=200, help="launches per CUDA graph")
    o.add_argument("--repeat", type=int, default=10, help="timed replays (median taken)")
    o.add_argument("--device", type=int, default=0)
    o.set_defaults(fn=bench_op_command)
    n = bsub.add_parser("network", help="a tuned zoo network vs PyTorch (resnet_v1-*)")
    n.add_argument("network", help="an ONNX file or a zoo network (resnet_v1-18/34/50 have a "
                                   "PyTorch twin)")
    add_input_argument(n)
    n.add_argument("--log", required=True, help="the network's record file")
    n.add_argument("--layout", choices=("NHWC", "NCHW"), default="NHWC")
    n.add_argument("--batch-size", type=int, default=1)
    n.add_argument("--image-size", type=int, default=None)
    from ..graph.passes import PRECISIONS

    n.add_argument("--dtype", choices=PRECISIONS, default="float32",
                   help="the precision to build the network in, as tune-network --dtype "
                        "(float16/bfloat16: mixed precision; tf32: TF32 matrix products); "
                        "PyTorch runs in the same precision")
    add_pad_channels_argument(n)
    n.set_defaults(fn=bench_network_command)
