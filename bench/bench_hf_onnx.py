"""Hugging Face and torchvision models as users bring them: exported to ONNX, imported,
built, timed.

For each model (full-size configurations with random weights, nothing downloaded; the
torchvision ones are ``convnext_t`` (ConvNeXt-T) and ``efficientnet_b0``):

- PyTorch exports it with ``torch.onnx.export`` (its default, the dynamo exporter, at
  opset 18; ``--exporter torchscript``: the TorchScript exporter at opset 17);
- ours: ``graph.from_onnx`` then ``graph.build(..., precision=--dtype)`` with the default
  schedules, or after ``--trials`` N of auto-scheduling from an empty log (tuned as
  ``ptxforge tune-network`` tunes, ``--profile`` printing its per-stage profile too), then
  timed with the default schedules as well (default/tuned); timed as one CUDA graph
  (``GraphModule.benchmark``);
- PyTorch: the same model in ``--dtype`` with SDPA attention, as a CUDA graph of eager and
  as ``torch.compile(mode="reduce-overhead")``, in the same process.

Outputs are checked first on random inputs against PyTorch float32 (the largest difference
as a share of the largest output; PyTorch ``--dtype``'s own difference beside it).

    python3 bench/bench_hf_onnx.py --models bert_encoder,bert,gpt2,vit [--trials 1000]
        [--dtype float16] [--batch 1] [--seq 128] [--exporter dynamo|torchscript] [--out DIR]
    python3 bench/bench_hf_onnx.py --models convnext_t,efficientnet_b0
"""

from __future__ import annotations

import argparse
import collections
import os
import sys
import time
import warnings

import numpy as np

MODELS = ("bert_encoder", "bert", "gpt2", "vit", "convnext_t", "efficientnet_b0")
VISION = {"convnext_t": "convnext_tiny", "efficientnet_b0": "efficientnet_b0"}


def hf_model(torch, name: str, seq: int, batch: int = 1):
    """``(module, example inputs as numpy arrays by name)``: the model in eval mode,
    float32, SDPA attention, ``batch`` rows of ``seq`` tokens (or images of 224x224)."""
    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    if name in VISION:
        import torchvision

        model = getattr(torchvision.models, VISION[name])(weights=None)
        px = rng.standard_normal((batch, 3, 224, 224)).astype(np.float32)
        return model.eval(), {"images": px}
    import transformers as tf

    if name in ("bert", "bert_encoder"):
        model = tf.BertModel(tf.BertConfig(attn_implementation="sdpa"), add_pooling_layer=False)
        if name == "bert_encoder":
            class Encoder(torch.nn.Module):
                def __init__(self, m):
                    super().__init__()
                    self.m = m

                def forward(self, hidden):
                    return self.m.encoder(hidden).last_hidden_state

            feeds = {"hidden": rng.standard_normal((batch, seq, 768)).astype(np.float32)}
            return Encoder(model).eval(), feeds
        ids = rng.integers(0, 30522, (batch, seq)).astype(np.int64)
        mask = np.ones((batch, seq), np.int64)

        class Bert(torch.nn.Module):
            def __init__(self, m):
                super().__init__()
                self.m = m

            def forward(self, input_ids, attention_mask):
                return self.m(input_ids=input_ids, attention_mask=attention_mask
                              ).last_hidden_state

        return Bert(model).eval(), {"input_ids": ids, "attention_mask": mask}
    if name == "gpt2":
        model = tf.GPT2LMHeadModel(tf.GPT2Config(attn_implementation="sdpa"))

        class Gpt2(torch.nn.Module):
            def __init__(self, m):
                super().__init__()
                self.m = m

            def forward(self, input_ids):
                return self.m(input_ids=input_ids, use_cache=False).logits

        ids = rng.integers(0, 50257, (batch, seq)).astype(np.int64)
        return Gpt2(model).eval(), {"input_ids": ids}
    if name == "vit":
        model = tf.ViTModel(tf.ViTConfig(attn_implementation="sdpa"), add_pooling_layer=False)

        class Vit(torch.nn.Module):
            def __init__(self, m):
                super().__init__()
                self.m = m

            def forward(self, pixel_values):
                return self.m(pixel_values=pixel_values).last_hidden_state

        px = rng.standard_normal((batch, 3, 224, 224)).astype(np.float32)
        return Vit(model).eval(), {"pixel_values": px}
    raise SystemExit(f"unknown model {name!r}; choose from {', '.join(MODELS)}")


def export(torch, model, feeds: dict, path: str, dynamo: bool) -> None:
    args = tuple(torch.from_numpy(v) for v in feeds.values())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, args, path, input_names=list(feeds), output_names=["out"],
                          opset_version=18 if dynamo else 17, dynamo=dynamo)


def kernel_table(lib) -> str:
    counts = collections.Counter()
    for step in lib.call_keys:
        if step is not None:
            counts[step] += 1
    return f"{sum(counts.values())} launches of {len(counts)} distinct functions"


def kernel_profile(torch, module, lib, feeds: dict, top: int) -> str:
    """Where the time goes: each of our fused functions' kernels as the CUDA profiler saw
    them in one run (plain launches, in order), summed per function, the ``top`` largest
    by total time. ``module`` must launch without programmatic dependent launch: with it a
    kernel starts before its predecessor ends and waits inside, so the profiler charges
    the predecessor's time to it."""
    from torch.profiler import ProfilerActivity, profile

    module.set_input(**feeds)
    module.run()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        module.run()
        torch.cuda.synchronize()
    kernels = sorted((e for e in prof.events() if e.device_type.name == "CUDA"
                      and "memcpy" not in e.name.lower() and "memset" not in e.name.lower()),
                     key=lambda e: e.time_range.start)
    steps = [key for key in lib.call_keys if key is not None]
    counts = [len(lib.functions[key].device_module.kernels()) for key in steps]
    if sum(counts) != len(kernels):
        return (f"  (the profiler saw {len(kernels)} kernels, the plan launches "
                f"{sum(counts)}: no per-function table)")
    per: dict[str, list] = {}
    k = 0
    for key, n in zip(steps, counts):
        us = sum(e.time_range.elapsed_us() for e in kernels[k:k + n])
        k += n
        entry = per.setdefault(lib.functions[key].func.name, [0.0, 0])
        entry[0] += us
        entry[1] += 1
    rows = sorted(((us, c, name) for name, (us, c) in per.items()), reverse=True)
    whole = sum(r[0] for r in rows)
    lines = [f"  kernels: {whole:.1f} us in {len(kernels)} launches of {len(steps)} calls; "
             f"the {min(top, len(rows))} functions that take longest:"]
    for us, count, name in rows[:top]:
        lines.append(f"  {us:9.2f} us {100 * us / whole:5.1f}%  x{count:<3d} {name[:100]}")
    return "\n".join(lines)


def launch_text(module) -> str:
    """How ``module``'s CUDA graph launches its kernels (``dependent_launch="auto"`` times
    both ways on the first run) and the two times it measured."""
    c = module.launch_choice
    if c is None:
        return "dependent" if module.dependent_launch else "plain"
    return (f"{c.chosen} (dependent {c.dependent_seconds * 1e3:.4f} ms, plain "
            f"{c.plain_seconds * 1e3:.4f} ms)")


def tune(net, params, dtype: str, trials: int, log: str, seed: int, profile: bool) -> float:
    """Tune the import from an empty ``log`` as ``ptxforge tune-network`` does (the same
    function, measurement settings and defaults); print its rate and, with ``profile``,
    its per-stage profile."""
    from ptxforge import autosched
    from ptxforge.autosched.network_tuning import tune_network
    from ptxforge.cli.profile import format_profile

    tasks, weights = autosched.extract_tasks(net, params, "cuda", precision=dtype)
    run = tune_network(tasks, weights, log, max(trials, len(tasks)), runner="gpu",
                       resume=False, seed=seed, sim_check=False)
    print(f"  tuned {len(tasks)} tasks, {run.trials} trials in {run.elapsed_s:.0f} s "
          f"({run.trials / run.elapsed_s:.1f} trials/s)", flush=True)
    if profile:
        print(format_profile(run.stages, run.builder, run.trials, run.elapsed_s, run.runner,
                             run.scheduler.measure_times), flush=True)
    return run.elapsed_s


def bench(torch, name: str, args) -> dict:
    import ptxforge
    from ptxforge import autosched, graph
    from ptxforge.graph.torch_reference import TORCH_DTYPES, cuda_graph, time_cuda

    row = {"model": name if args.batch == 1 else f"{name} b{args.batch}"}
    seq = args.seq if name != "gpt2" else args.gpt2_seq
    model, feeds = hf_model(torch, name, seq, args.batch)
    path = os.path.join(args.out, f"{name}_b{args.batch}_s{seq}_{args.exporter}.onnx")
    t0 = time.perf_counter()
    export(torch, model, feeds, path, args.exporter == "dynamo")
    print(f"[{name}] exported to {path} in {time.perf_counter() - t0:.0f} s", flush=True)
    net, params = graph.from_onnx(path)
    log = os.path.join(args.out, f"{name}_{args.dtype}.json")
    if args.trials:
        if os.path.exists(log):
            os.remove(log)
        row["tune_s"] = tune(net, params, args.dtype, args.trials, log, args.seed,
                             bool(args.profile))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", graph.NoTuningRecordWarning)
        t0 = time.perf_counter()
        if args.trials:
            with autosched.ApplyHistoryBest(log):
                lib = graph.build(net, "cuda", params, precision=args.dtype)
        else:
            lib = graph.build(net, "cuda", params, precision=args.dtype)
    print(f"[{name}] built in {time.perf_counter() - t0:.0f} s: {kernel_table(lib)}",
          flush=True)
    dev = ptxforge.cuda(0)
    module = graph.GraphModule(lib, dev)
    module.set_input(**feeds)
    module.run()
    ours = module.get_output(0).numpy().astype(np.float32)

    tdtype = getattr(torch, TORCH_DTYPES[args.dtype])
    inputs = [torch.from_numpy(v).cuda() for v in feeds.values()]
    low_inputs = [t.to(tdtype) if t.is_floating_point() else t for t in inputs]
    with torch.no_grad():
        m32 = model.cuda()
        ref = m32(*inputs).float().cpu().numpy()
        mlo = model.to(tdtype)
        lo = mlo(*low_inputs).float().cpu().numpy()
        scale = float(np.abs(ref).max())
        row["err"] = float(np.abs(ours - ref).max()) / scale
        row["torch_err"] = float(np.abs(lo - ref).max()) / scale
        print(f"[{name}] largest difference from PyTorch float32: ours {row['err']:.2e}, "
              f"PyTorch {args.dtype} {row['torch_err']:.2e}", flush=True)
        if row["err"] > max(5 * row["torch_err"], 1e-2):
            raise SystemExit(f"{name}: our output differs from PyTorch's ({row['err']:.2e})")
        if args.match_float32:
            # the same import built in float32 against PyTorch float32: where random weights
            # overflow 16 bits (both sides' 16-bit errors are then large), this is the check
            lib32 = graph.build(net, "cuda", params, precision="float32")
            m32_module = graph.GraphModule(lib32, dev)
            m32_module.set_input(**feeds)
            m32_module.run()
            got32 = m32_module.get_output(0).numpy().astype(np.float32)
            # onnxruntime (CPU, float32) on the same file is the third opinion: a full-size
            # network with random weights can be ill-conditioned enough that two correct
            # float32 implementations differ by more than a fixed tolerance
            import onnxruntime as ort

            sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
            want = sess.run(None, feeds)[0].astype(np.float32)
            row["err32"] = float(np.abs(got32 - want).max()) / scale
            torch_ort = float(np.abs(ref - want).max()) / scale
            print(f"[{name}] float32 build: largest difference from onnxruntime float32 "
                  f"{row['err32']:.2e} (PyTorch float32 from onnxruntime {torch_ort:.2e}, "
                  f"ours from PyTorch {float(np.abs(got32 - ref).max()) / scale:.2e})",
                  flush=True)
            if not row["err32"] <= max(1e-4, 3 * torch_ort):
                raise SystemExit(f"{name}: our float32 build differs from onnxruntime's "
                                 f"({row['err32']:.2e}; PyTorch's differs by {torch_ort:.2e})")
        row["ours_ms"] = module.benchmark(dev, repeat=5, min_repeat_ms=300).median * 1e3
        if args.trials:
            # the same import with the default schedules, as a user who never tunes runs it
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", graph.NoTuningRecordWarning)
                plain_lib = graph.build(net, "cuda", params, precision=args.dtype)
            plain = graph.GraphModule(plain_lib, dev)
            plain.set_input(**feeds)
            row["default_ms"] = plain.benchmark(dev, repeat=5, min_repeat_ms=300).median * 1e3
            ratio = row["default_ms"] / row["ours_ms"]
            print(f"[{name}] default schedules {row['default_ms']:.4f} ms, tuned "
                  f"{row['ours_ms']:.4f} ms: default/tuned {ratio:.2f}; launches "
                  f"{launch_text(plain)} / {launch_text(module)}", flush=True)
            if args.profile:
                print(f"[{name}] the default schedules' kernels:", flush=True)
                plain = graph.GraphModule(plain_lib, dev, use_cuda_graph=False,
                                          dependent_launch=False)
                print(kernel_profile(torch, plain, plain_lib, feeds, args.profile), flush=True)

        row["graph_ms"] = time_cuda(torch, cuda_graph(torch, lambda: mlo(*low_inputs)), 300,
                                    5) * 1e3
        t0 = time.perf_counter()
        compiled = torch.compile(mlo, mode="reduce-overhead")
        for _ in range(5):
            compiled(*low_inputs)
        torch.cuda.synchronize()
        row["compile_s"] = time.perf_counter() - t0
        row["compile_ms"] = time_cuda(torch, lambda: compiled(*low_inputs), 300, 5) * 1e3
    if args.profile:
        plain = graph.GraphModule(lib, dev, use_cuda_graph=False, dependent_launch=False)
        print(kernel_profile(torch, plain, lib, feeds, args.profile), flush=True)
    print(f"[{name}] ours {row['ours_ms']:.4f} ms | PyTorch {args.dtype} CUDA graph "
          f"{row['graph_ms']:.4f} ms | torch.compile(reduce-overhead) {row['compile_ms']:.4f} "
          f"ms | compile/ours {row['compile_ms'] / row['ours_ms']:.2f}x", flush=True)
    return row


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--models", default="bert_encoder,bert,gpt2,vit")
    p.add_argument("--dtype", default="float16", choices=("float16", "bfloat16", "float32"))
    p.add_argument("--seq", type=int, default=128)
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--gpt2-seq", type=int, default=1024)
    p.add_argument("--trials", type=int, default=0,
                   help="auto-scheduling trials per model from an empty log (0: defaults)")
    p.add_argument("--exporter", default="dynamo", choices=("dynamo", "torchscript"))
    p.add_argument("--profile", type=int, default=0,
                   help="print the N kernels of ours that take the most time")
    p.add_argument("--match-float32", action="store_true",
                   help="also build the import in float32 and check it against PyTorch float32")
    p.add_argument("--out", default="hf_onnx")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--fused-attention", default="auto", choices=("auto", "on", "off"),
                   help="the graph pass config fused_attention for tuning and the build: "
                        "auto (the fused kernel from AUTO_MIN_KEYS keys), on, off")
    args = p.parse_args(argv)
    import torch
    from ptxforge.graph import GraphPassContext

    fused = {"auto": "auto", "on": True, "off": False}[args.fused_attention]
    with GraphPassContext(config={"fused_attention": fused}):
        return _run(torch, args)


def _run(torch, args) -> int:
    os.makedirs(args.out, exist_ok=True)
    rows = []
    for name in args.models.split(","):
        try:
            rows.append(bench(torch, name, args))
        except SystemExit as e:
            print(f"[{name}] FAILED: {e}", flush=True)
        except Exception as e:  # noqa: BLE001 - one model's failure must not hide the rest
            print(f"[{name}] FAILED: {type(e).__name__}: {str(e)[:2000]}", flush=True)
    print("\n| model | ours ms | PyTorch CUDA graph ms | torch.compile ms | compile/ours | err |")
    print("| --- | --- | --- | --- | --- | --- |")
    for r in rows:
        print(f"| {r['model']} | {r['ours_ms']:.4f} | {r['graph_ms']:.4f} | "
              f"{r['compile_ms']:.4f} | {r['compile_ms'] / r['ours_ms']:.2f}x | "
              f"{r['err']:.1e} |")
    return 0 if len(rows) == len(args.models.split(",")) else 1


if __name__ == "__main__":
    sys.exit(main())
