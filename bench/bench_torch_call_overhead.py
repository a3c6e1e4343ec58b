"""The host's time per call of a ``torch.compile(backend="ptxforge")`` model, layer by layer:
Dynamo alone (a backend that returns a ready output), Dynamo with AOT autograd (an inference
compiler that returns a ready output), and the ptxforge backend with its kernel launches
stubbed (on a machine without a GPU the partitions' GPU call path is run on CPU tensors with
the launch replaced by a no-op), each the least of ``--repeat`` timings of ``--number``
calls, in the CPU time of this thread (``--clock wall`` for the wall clock): a host shared
with other work only ever adds to the wall time. A batch-1 network whose kernels take a few
hundred microseconds is bound by the host when these add up to as much.

    python3 bench/bench_torch_call_overhead.py --models resnet50 bert
    python3 bench/bench_torch_call_overhead.py --models resnet50 --side 64   # faster build

On a GPU machine ``--gpu`` times the real backend on CUDA tensors instead of the stubbed one
(host time per call and CUDA-event time per call).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import warnings

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


CLOCKS = {"cpu": time.thread_time, "wall": time.perf_counter}
clock = CLOCKS["cpu"]


def host_us(fn, args, kwargs, number: int, repeat: int) -> float:
    """The least over ``repeat`` runs of ``number`` calls of the host's microseconds per
    call (``clock``)."""
    with torch.no_grad():
        for _ in range(20):
            fn(*args, **kwargs)
        times = []
        for _ in range(repeat):
            t0 = clock()
            for _ in range(number):
                fn(*args, **kwargs)
            times.append((clock() - t0) * 1e6 / number)
    return min(times)


def ready_output_backend(with_aot: bool):
    """A Dynamo backend whose compiled graph returns the outputs of its first run: what is
    left is the cost of Dynamo's guards and calls (and of AOT autograd's wrapper)."""
    def compiler(gm, example_inputs):
        with torch.no_grad():
            outs = gm(*example_inputs)

        def run(*args):
            return outs
        return run

    if not with_aot:
        return compiler
    from functorch.compile import make_boxed_func
    from torch._dynamo.backends.common import aot_autograd

    def inference(gm, example_inputs):
        box = {}

        def run(args):
            if "outs" not in box:
                box["outs"] = gm(*args)
            return box["outs"]
        run._boxed_call = True
        return run

    return aot_autograd(fw_compiler=lambda gm, ex: make_boxed_func(gm),
                        inference_compiler=inference)


class _StubbedModule:
    """What the GPU call path uses of a partition's module, with the launch a no-op."""

    def __init__(self, real):
        self.lib = real.lib
        self.pointer_binding = real.pointer_binding
        self.device = type("Device", (), {"device_id": 0})()

    def run_pointers(self, binding, inputs, outputs, stream) -> None:
        return None


def stub_launches(parts) -> None:
    """Each built partition (simulator) switched to the GPU call path on CPU tensors, with
    its launch stubbed."""
    from ptxforge.torch_call import GpuCall

    for p in parts:
        call = GpuCall(_StubbedModule(p.module), p.names, p.used, lambda tensors: None)
        call.device_type, call.device, call.stream = "cpu", torch.device("cpu"), lambda i: 0
        p._gpu_call = call


def run(name: str, args) -> list[tuple[str, float]]:
    from bench_torch_backend import build

    work = build(name, tiny=args.tiny, seq=args.seq)
    model = work.model.half() if args.half else work.model
    device = "cuda" if args.gpu else "cpu"
    model = model.to(device)
    x = tuple(a.to(device) if isinstance(a, torch.Tensor) else a for a in work.args)
    x = tuple(a.half() if args.half and a.is_floating_point() else a for a in x)
    kw = {k: v.to(device) for k, v in work.kwargs.items()}
    description = work.description
    if name == "resnet50" and args.side:
        x = (torch.randn(1, 3, args.side, args.side, device=device, dtype=x[0].dtype),)
        description += f" (run at {args.side}x{args.side})"
    rows = []
    for label, backend in (("Dynamo alone", ready_output_backend(False)),
                           ("Dynamo + AOT autograd", ready_output_backend(True))):
        torch._dynamo.reset()
        fn = torch.compile(model, backend=backend, dynamic=False)
        rows.append((label, host_us(fn, x, kw, args.number, args.repeat)))
    parts: list = []
    torch._dynamo.reset()
    opts = {"precision": "float16" if args.half else "float32", "on_build": parts.append,
            "target": "cuda" if args.gpu else "sim -arch=sm_80"}
    fn = torch.compile(model, backend="ptxforge", dynamic=False, options=opts)
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fn(*x, **kw)  # builds (on the CPU: runs once on the simulator)
    if not args.gpu:
        stub_launches(parts)
        label = "ptxforge backend, launches stubbed"
    else:
        label = "ptxforge backend"
    rows.append((label, host_us(fn, x, kw, args.number, args.repeat)))
    print(f"\n{description} ({sum(len(p.names) for p in parts)} partition inputs, "
          f"{sum(len(p.static) for p in parts)} bound as weights)")
    print("| what runs per call | host us per call |\n| --- | --- |")
    for label, us in rows:
        print(f"| {label} | {us:.1f} |")
    return rows


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", nargs="+", default=["resnet50", "bert"],
                   choices=("bert", "resnet50", "gpt2", "vit"))
    p.add_argument("--tiny", action="store_true", help="the tiny configurations")
    p.add_argument("--side", type=int, default=64,
                   help="ResNet-50's image side (the host's work does not depend on it)")
    p.add_argument("--seq", type=int, default=128)
    p.add_argument("--half", action="store_true", default=True)
    p.add_argument("--gpu", action="store_true", help="time the real backend on a GPU")
    p.add_argument("--clock", choices=sorted(CLOCKS), default="cpu",
                   help="this thread's CPU time (default) or the wall clock")
    p.add_argument("--number", type=int, default=200)
    p.add_argument("--repeat", type=int, default=9)
    args = p.parse_args(argv)
    global clock
    clock = CLOCKS[args.clock]
    torch.set_num_threads(1)  # the host's Python path, not intra-op threads, is timed
    for name in args.models:
        run(name, args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
