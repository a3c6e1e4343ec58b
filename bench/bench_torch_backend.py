"""torch.compile(backend="ptxforge") against torch.compile(mode="reduce-overhead"), in one
process on one GPU, fp16: HF BERT-base (seq 128, batch 1), torchvision ResNet-50 (batch 1),
GPT-2 small (seq 128) and ViT-B/16 (224x224), PyTorch with SDPA attention and its CUDA graph.

Each model is first tuned from an empty log with ``ptxforge.tune_torch`` (``--trials`` in
all), then compiled both ways; the outputs are checked against PyTorch eager fp32 on random
inputs before anything is timed (CUDA events, median of ``--repeat`` timings of ``--number``
calls each, after warm-up). Prints a table with the ratios.

    python bench/bench_torch_backend.py --trials 2000 --logdir bench/results/torch_logs
    python bench/bench_torch_backend.py --models resnet50 --trials 0   # default schedules
"""

from __future__ import annotations

import argparse
import os
import statistics

import torch

MODELS = ("bert", "resnet50", "gpt2", "vit")


def build(name: str):
    """The model (fp32, eval, CUDA) and its example inputs."""
    torch.manual_seed(0)
    if name == "resnet50":
        import torchvision

        return torchvision.models.resnet50().eval().cuda(), (torch.randn(1, 3, 224, 224),)
    if name == "vit":
        import torchvision

        return torchvision.models.vit_b_16().eval().cuda(), (torch.randn(1, 3, 224, 224),)
    import transformers

    if name == "bert":
        cfg = transformers.BertConfig(attn_implementation="sdpa")
        model = transformers.BertModel(cfg)
    elif name == "gpt2":
        cfg = transformers.GPT2Config(attn_implementation="sdpa")
        model = transformers.GPT2Model(cfg)
    else:
        raise SystemExit(f"unknown model {name!r}; choose from {MODELS}")
    model.config.return_dict = False
    ids = torch.randint(0, cfg.vocab_size, (1, 128))
    return model.eval().cuda(), (ids,)


def to_device(args, half: bool):
    out = []
    for a in args:
        a = a.cuda()
        out.append(a.half() if half and a.is_floating_point() else a)
    return tuple(out)


def first(out):
    while isinstance(out, (tuple, list)):
        out = out[0]
    return out


def time_it(fn, args, number: int, repeat: int) -> float:
    with torch.no_grad():
        for _ in range(3):
            fn(*args)
        torch.cuda.synchronize()
        times = []
        for _ in range(repeat):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(number):
                fn(*args)
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) / number)
    return statistics.median(times)


def main() -> int:
    import ptxforge

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", nargs="+", default=list(MODELS), choices=MODELS)
    p.add_argument("--trials", type=int, default=2000, help="tuning trials per model (0: none)")
    p.add_argument("--logdir", default="bench/results/torch_logs")
    p.add_argument("--number", type=int, default=50)
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--tolerance", type=float, default=3e-2,
                   help="largest difference from eager fp32, as a share of the largest output")
    args = p.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("this benchmark needs a CUDA GPU")
    os.makedirs(args.logdir, exist_ok=True)
    rows = []
    for name in args.models:
        model, inputs = build(name)
        x32 = to_device(inputs, half=False)
        with torch.no_grad():
            ref = first(model(*x32)).float()
        half = model.half()
        x16 = to_device(inputs, half=True)
        log = os.path.join(args.logdir, f"{name}_fp16.json")
        if args.trials:
            ptxforge.tune_torch(half, x16, trials=args.trials, log=log, precision="float16")
        torch._dynamo.reset()
        ours = torch.compile(half, backend="ptxforge", dynamic=False, options={
            "precision": "float16", "log": log if os.path.exists(log) else None,
            "target": "cuda"})
        theirs = torch.compile(half, mode="reduce-overhead", dynamic=False)
        with torch.no_grad():
            for label, fn in (("ptxforge", ours), ("reduce-overhead", theirs)):
                got = first(fn(*x16)).float()
                err = float((got - ref).abs().max() / ref.abs().max().clamp_min(1e-30))
                if err > args.tolerance:
                    raise SystemExit(f"{name}: {label} differs from eager fp32 by {err:.2e} of "
                                     "the largest output")
        t_ours = time_it(ours, x16, args.number, args.repeat)
        t_theirs = time_it(theirs, x16, args.number, args.repeat)
        rows.append((name, t_ours, t_theirs))
        print(f"{name}: ptxforge {t_ours:.4f} ms, reduce-overhead {t_theirs:.4f} ms", flush=True)
    print(f"\nGPU: {torch.cuda.get_device_name()}, torch {torch.__version__}, fp16, "
          f"{args.trials} trials per model")
    print("| model | ptxforge | torch.compile reduce-overhead | ratio |")
    print("| --- | --- | --- | --- |")
    for name, a, b in rows:
        print(f"| {name} | {a:.4f} ms | {b:.4f} ms | {b / a:.2f}x |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
