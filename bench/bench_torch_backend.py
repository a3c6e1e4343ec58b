"""torch.compile(backend="ptxforge") against torch.compile(mode="reduce-overhead"), in one
process on one GPU, fp16: Hugging Face BERT-base (the whole model with its attention mask,
seq 128, batch 1), ResNet-50 (batch 1, 224x224; torchvision's, else transformers' ResNet-50,
the same network), GPT-2 small (seq 128) and ViT-B/16 (224x224), PyTorch with SDPA attention
and its CUDA graph.

For each model and each ``--fused-attention`` setting, ptxforge is first tuned from an empty
log with ``ptxforge.tune_torch`` (``--trials`` in all; an existing log is moved aside unless
``--resume``), then the model is compiled both ways. Every compiled model is checked against
PyTorch eager fp32 on random inputs before anything is timed (CUDA events, the median of
``--repeat`` timings of ``--number`` calls each, after warm-up; next to it the host's time
to issue one call, which equals it when the calls are bound by Python, not by the GPU).
Prints a table per model with the ratios, the kernel launches per call, the functions a
record scheduled out of those tuning made a task of (naming the ones that fell back to the
default schedule) and whether each compiled graph replays a CUDA graph; writes it as JSON
with ``--json``. ``--from-torch`` adds a row for the same fp16 model through
``graph.from_torch`` and ``graph.build`` with the same log, run by ``GraphModule`` (its own
CUDA graph, no per-call Python), and says whether it compiled the same functions.

    python bench/bench_torch_backend.py --models bert resnet50 gpt2 vit --trials 2000
    python bench/bench_torch_backend.py --models bert --trials 0 --fused-attention both
    python bench/bench_torch_backend.py --dry-run          # tiny configs on the simulator

``--dry-run`` needs no GPU: tiny configurations of the same models go through the same
steps (tuning estimated on the simulator, the backend on ``sim -arch=sm_80``, the check
against eager fp32); nothing is timed and PyTorch's CUDA-graph mode is left out.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from dataclasses import asdict, dataclass, field

import torch

MODELS = ("bert", "resnet50", "gpt2", "vit")
SIM_TARGET = "sim -arch=sm_80"


@dataclass
class Workload:
    """One model to compare: the fp32 module (eval), its positional inputs and keyword
    inputs, what it is, and whether it has attention (else one ``--fused-attention``
    setting is enough)."""

    name: str
    model: torch.nn.Module
    args: tuple
    kwargs: dict
    description: str
    attention: bool = True


@dataclass
class Row:
    """The result of one model: milliseconds per call of each compiled variant (None: not
    timed) and the host's milliseconds to issue one call, each variant's largest difference
    from eager fp32 (a share of the largest output), and what ptxforge compiled."""

    model: str
    description: str
    times_ms: dict = field(default_factory=dict)
    host_ms: dict = field(default_factory=dict)
    errors: dict = field(default_factory=dict)
    compiled: dict = field(default_factory=dict)


def compiled_summary(parts: list) -> dict:
    """What ptxforge compiled (from the backend's ``on_build`` partitions, after their first
    call): partitions, the attentions kept whole, distinct functions, those a tuning record
    scheduled out of those tuning makes a task of (the reshapes run as copies are no task),
    the tasks that fell back to the default schedule, the fused attention kernels, the
    function calls and kernel launches per call, and whether each partition replays a CUDA
    graph."""
    reports = [p.report() for p in parts]
    funcs = [f for p in parts for f in p.lib.functions.values()]
    return {
        "partitions": len(parts),
        "attentions": sum(c.op == "nn.attention" for p in parts for c in p.net.calls()),
        "functions": len(funcs),
        "tuned": sum(r.tuned for r in reports),
        "tunable": sum(r.tunable for r in reports),
        "fallbacks": [name for r in reports for name in r.fallbacks],
        "fused_attention_kernels": sum(f.pipeline_text.startswith("fused_attention")
                                       for f in funcs),
        "steps": sum(r.steps for r in reports),
        "launches": sum(r.launches for r in reports),
        "cuda_graph": sorted({r.cuda_graph for r in reports}),
        "keys": sorted(k for p in parts for k in p.lib.functions),
    }


def _hf(cls: str, config_cls: str, **config):
    import transformers

    cfg = getattr(transformers, config_cls)(**config)
    cfg.return_dict = False
    return getattr(transformers, cls)(cfg)


def build(name: str, *, tiny: bool = False, batch: int = 1, seq: int = 128) -> Workload:
    """The model ``name`` (fp32, eval, on the CPU, seeded weights) and random inputs;
    ``tiny``: a small configuration of the same architecture."""
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(1)
    if tiny:
        seq = min(seq, 16)
    if name == "bert":
        size = (dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                     intermediate_size=64, vocab_size=96, max_position_embeddings=64)
                if tiny else {})
        model = _hf("BertModel", "BertConfig", attn_implementation="sdpa", **size)
        ids = torch.randint(0, model.config.vocab_size, (batch, seq), generator=gen)
        mask = torch.ones(batch, seq, dtype=torch.int64)
        return Workload(name, model.eval(), (ids,), {"attention_mask": mask},
                        f"HF BertModel{' (tiny)' if tiny else ''}, batch {batch}, seq {seq}")
    if name == "gpt2":
        size = (dict(n_embd=32, n_layer=2, n_head=2, vocab_size=96, n_positions=64,
                     bos_token_id=0, eos_token_id=0) if tiny else {})
        model = _hf("GPT2Model", "GPT2Config", attn_implementation="sdpa", use_cache=False,
                    **size)
        ids = torch.randint(0, model.config.vocab_size, (batch, seq), generator=gen)
        return Workload(name, model.eval(), (ids,), {},
                        f"HF GPT2Model{' (tiny)' if tiny else ''}, batch {batch}, seq {seq}")
    if name == "vit":
        size = (dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                     intermediate_size=64, image_size=32, patch_size=8) if tiny else {})
        model = _hf("ViTModel", "ViTConfig", attn_implementation="sdpa", **size)
        side = model.config.image_size
        x = torch.randn(batch, 3, side, side, generator=gen)
        return Workload(name, model.eval(), (x,), {},
                        f"HF ViTModel (ViT-B/16{' layout, tiny' if tiny else ''}), "
                        f"batch {batch}, {side}x{side}")
    if name == "resnet50":
        side = 32 if tiny else 224
        x = torch.randn(batch, 3, side, side, generator=gen)
        if not tiny:
            try:
                import torchvision

                return Workload(name, torchvision.models.resnet50().eval(), (x,), {},
                                f"torchvision ResNet-50, batch {batch}, {side}x{side}",
                                attention=False)
            except ImportError:
                pass
        size = (dict(embedding_size=8, hidden_sizes=[8, 16, 16, 32], depths=[1, 1, 1, 1])
                if tiny else {})
        model = _hf("ResNetModel", "ResNetConfig", **size)
        return Workload(name, model.eval(), (x,), {},
                        f"HF ResNetModel (ResNet-50{' layout, tiny' if tiny else ''}), "
                        f"batch {batch}, {side}x{side}", attention=False)
    raise SystemExit(f"unknown model {name!r}; choose from {', '.join(MODELS)}")


def to_device(values, device: str, half: bool):
    """Tensors moved to ``device``, floating ones cast to fp16 with ``half``."""
    def move(a):
        if not isinstance(a, torch.Tensor):
            return a
        a = a.to(device)
        return a.half() if half and a.is_floating_point() else a

    if isinstance(values, dict):
        return {k: move(v) for k, v in values.items()}
    return tuple(move(a) for a in values)


def first(out) -> torch.Tensor:
    while isinstance(out, (tuple, list)):
        out = out[0]
    return out


def relative_error(got: torch.Tensor, want: torch.Tensor) -> float:
    got, want = got.float().cpu(), want.float().cpu()
    return float((got - want).abs().max() / want.abs().max().clamp_min(1e-30))


SKIP_GUARDS = False
"""``--skip-guard-eval``: time every compiled variant (ours and PyTorch's alike) under
``torch.compiler.set_stance(skip_guard_eval_unsafe=True)``, which skips Dynamo's guard
checks on calls once a model has one compiled graph."""


def time_it(fn, args, kwargs, number: int, repeat: int) -> tuple[float, float]:
    """The median over ``repeat`` CUDA-event timings of ``number`` calls, in ms per call,
    and the median host time of issuing one call (before the GPU finished): when the two
    are about equal the calls are bound by the host, not by the kernels."""
    import contextlib
    import time

    stance = (torch.compiler.set_stance("default", skip_guard_eval_unsafe=True)
              if SKIP_GUARDS else contextlib.nullcontext())
    with torch.no_grad(), stance:
        for _ in range(3):
            fn(*args, **kwargs)
        torch.cuda.synchronize()
        times, host = [], []
        for _ in range(repeat):
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            start.record()
            t0 = time.perf_counter()
            for _ in range(number):
                fn(*args, **kwargs)
            host.append((time.perf_counter() - t0) * 1e3 / number)
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) / number)
    return statistics.median(times), statistics.median(host)


def fused_settings(choice: str) -> list[bool]:
    return {"on": [True], "off": [False], "both": [True, False]}[choice]


def variant(fused: bool, attention: bool = True) -> str:
    return f"ptxforge (fused attention {'on' if fused else 'off'})" if attention else "ptxforge"


def fresh_log(path: str, resume: bool) -> None:
    """Start ``path`` empty (the old one kept beside it as ``.prev``) unless ``resume``."""
    if os.path.exists(path) and not resume:
        os.replace(path, path + ".prev")
        print(f"moved the earlier log aside: {path}.prev", flush=True)


def compile_ours(model, log: str | None, target: str, fused: bool, parts: list):
    """``model`` through the backend; each compiled partition is appended to ``parts``."""
    torch._dynamo.reset()
    return torch.compile(model, backend="ptxforge", dynamic=False, options={
        "precision": "float16", "log": log if log and os.path.exists(log) else None,
        "target": target, "fused_attention": fused, "on_build": parts.append})


def run_model(work: Workload, args) -> Row:
    """Tune, compile, check and (on a GPU) time one model."""
    import ptxforge

    device = "cpu" if args.dry_run else "cuda"
    target = SIM_TARGET if args.dry_run else "cuda"
    row = Row(work.name, work.description)
    with torch.no_grad():
        ref = first(work.model(*work.args, **work.kwargs)).float()
    half = work.model.half().to(device)
    x16, kw16 = to_device(work.args, device, True), to_device(work.kwargs, device, True)
    settings = fused_settings(args.fused_attention)
    for fused in settings if work.attention else settings[:1]:
        label = variant(fused, work.attention)
        log = os.path.join(args.logdir, f"{work.name}_fp16{'_fused' if fused else ''}.json")
        if args.trials:
            fresh_log(log, args.resume)
            ptxforge.tune_torch(half, x16, trials=args.trials, log=log, precision="float16",
                                target="sim" if args.dry_run else "cuda", kwargs=kw16,
                                fused_attention=fused)
        parts: list = []
        ours = compile_ours(half, log, target, fused, parts)
        row.errors[label] = check(ours, x16, kw16, ref, label, work.name, args.tolerance)
        row.compiled[label] = compiled_summary(parts)
        for p in parts:
            print(f"{work.name}: {label}: {p.report().summary()}", flush=True)
        if not args.dry_run:
            row.times_ms[label], row.host_ms[label] = time_it(ours, x16, kw16, args.number,
                                                              args.repeat)
        if args.from_torch:
            from_torch_row(row, work, half, x16, kw16, ref, log, target, fused, label, args)
    if not args.dry_run:
        label = "torch.compile reduce-overhead"
        torch._dynamo.reset()
        theirs = torch.compile(half, mode="reduce-overhead", dynamic=False)
        row.errors[label] = check(theirs, x16, kw16, ref, label, work.name, args.tolerance)
        row.times_ms[label], row.host_ms[label] = time_it(theirs, x16, kw16, args.number,
                                                          args.repeat)
    return row


def from_torch_row(row: Row, work: Workload, half, x16, kw16, ref, log, target: str,
                   fused: bool, ours: str, args) -> None:
    """The same fp16 model through ``graph.from_torch`` and ``graph.build`` with the same log
    and options, run by ``GraphModule`` (its own CUDA graph, no per-call Python): whether
    the backend built the same functions (workload keys), and on a GPU its time, which the
    backend's should equal but for the host's work per call."""
    import contextlib
    import warnings

    import numpy as np
    import ptxforge
    from ptxforge import autosched, graph

    label = f"graph.from_torch, same log{' (fused attention on)' if fused else ''}"
    if not work.attention:
        label = "graph.from_torch, same log"
    net, params = graph.from_torch(half, x16, kw16)
    records = autosched.ApplyHistoryBest(log) if os.path.exists(log) else None
    with warnings.catch_warnings(), records or contextlib.nullcontext():
        warnings.simplefilter("ignore", graph.NoTuningRecordWarning)
        lib = graph.build(net, target=target, params=params, precision="float16",
                          fused_attention=fused)
    from ptxforge.torch_report import COPY, TUNED, function_reports, library_launches

    keys = sorted(lib.functions)
    same = keys == row.compiled[ours]["keys"]
    funcs = function_reports(lib)
    row.compiled[label] = {
        "functions": len(keys), "keys": keys, "same_functions_as_backend": same,
        "tuned": sum(f.schedule == TUNED for f in funcs),
        "tunable": sum(f.schedule != COPY for f in funcs),
        "fallbacks": [f.name for f in funcs if f.schedule not in (TUNED, COPY)],
        "steps": sum(k is not None for k in lib.call_keys),
        "launches": library_launches(lib)}
    c = row.compiled[label]
    print(f"{work.name}: {label}: {c['tuned']} of {c['tunable']} functions tuned; the same "
          f"functions as {ours}: {'yes' if same else 'NO'}", flush=True)
    dev = None if args.dry_run else ptxforge.cuda(0)
    mod = graph.GraphModule(lib, dev)
    # the model's inputs, positional then keyword, are the graph's parameters that are no
    # weights, in that order
    names = [p.name for p in net.params if p.name not in params]
    feeds = dict(zip(names, list(x16) + list(kw16.values())))
    mod.set_input(**{k: v.detach().cpu().numpy() for k, v in feeds.items()
                     if k in lib.input_names})
    mod.run()
    out = torch.from_numpy(np.asarray(mod.get_output(0).numpy()).astype(np.float32))
    row.errors[label] = relative_error(out, ref)
    if not args.dry_run:
        row.times_ms[label] = mod.benchmark(dev, repeat=args.repeat, min_repeat_ms=300).median * 1e3


def check(fn, x, kw, ref, label: str, model: str, tolerance: float) -> float:
    """The largest difference of ``fn``'s output from eager fp32; over ``tolerance`` the
    benchmark stops (a wrong result is not timed)."""
    with torch.no_grad():
        got = first(fn(*x, **kw))
    err = relative_error(got, ref)
    if not err <= tolerance:
        raise SystemExit(f"{model}: {label} differs from eager fp32 by {err:.2e} of the "
                         f"largest output (tolerance {tolerance:.0e})")
    print(f"{model}: {label} matches eager fp32 ({err:.2e} of the largest output)", flush=True)
    return err


def table(rows: list[Row]) -> str:
    """One markdown table per model: each variant's time, its ratio to PyTorch's
    reduce-overhead time and its difference from eager fp32."""
    out = []
    for row in rows:
        base = row.times_ms.get("torch.compile reduce-overhead")
        out += [f"\n{row.model}: {row.description}",
                "| variant | ms per call | host ms per call | speed-up over reduce-overhead "
                "| max error | launches | functions tuned | CUDA graph |",
                "| --- | --- | --- | --- | --- | --- | --- | --- |"]
        for label, err in row.errors.items():
            t = row.times_ms.get(label)
            ms = f"{t:.4f}" if t is not None else "not timed"
            h = row.host_ms.get(label)
            host = f"{h:.4f}" if h is not None else "-"
            ratio = f"{base / t:.2f}x" if t and base else "-"
            c = row.compiled.get(label) or {}
            launches = c.get("launches", "-")
            tuned = (f"{c['tuned']} of {c.get('tunable', c['functions'])}" if c else "-")
            falls = c.get("fallbacks") or []
            if falls:
                more = f", {len(falls) - 4} more" if len(falls) > 4 else ""
                tuned += " (default: " + ", ".join(falls[:4]) + more + ")"
            graph_state = ", ".join(c.get("cuda_graph", [])) or "-"
            out.append(f"| {label} | {ms} | {host} | {ratio} | {err:.1e} | {launches} | "
                       f"{tuned} | {graph_state} |")
    return "\n".join(out)


def parse(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", nargs="+", default=list(MODELS), choices=MODELS)
    p.add_argument("--trials", type=int, default=2000,
                   help="tuning trials per model and setting, from an empty log (0: none)")
    p.add_argument("--resume", action="store_true",
                   help="tune on from the existing logs instead of starting them empty")
    p.add_argument("--fused-attention", choices=("on", "off", "both"), default="both",
                   help="compile attention as the fused kernel, decomposed, or both")
    p.add_argument("--logdir", default="bench/results/torch_logs")
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--seq", type=int, default=128, help="sequence length of BERT and GPT-2")
    p.add_argument("--number", type=int, default=50)
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--tolerance", type=float, default=3e-2,
                   help="largest difference from eager fp32, as a share of the largest output")
    p.add_argument("--from-torch", action="store_true",
                   help="also build the model through graph.from_torch with the same log and "
                        "time it with GraphModule: the same functions, without the backend's "
                        "per-call work")
    p.add_argument("--skip-guard-eval", action="store_true",
                   help="time all compiled variants with Dynamo's guard checks skipped "
                        "(torch.compiler.set_stance(skip_guard_eval_unsafe=True)): how much "
                        "of a call is the host's")
    p.add_argument("--json", help="write the rows to this file")
    p.add_argument("--dry-run", action="store_true",
                   help="tiny configurations on the CPU simulator; nothing timed")
    return p.parse_args(argv)


def main(argv=None) -> int:
    args = parse(argv)
    global SKIP_GUARDS
    SKIP_GUARDS = args.skip_guard_eval
    if not args.dry_run and not torch.cuda.is_available():
        raise SystemExit("this benchmark needs a CUDA GPU (or --dry-run)")
    os.makedirs(args.logdir, exist_ok=True)
    rows = []
    for name in args.models:
        work = build(name, tiny=args.dry_run, batch=args.batch, seq=args.seq)
        rows.append(run_model(work, args))
    where = ("the CPU simulator (dry run, not timed)" if args.dry_run else
             f"{torch.cuda.get_device_name()}")
    print(f"\n{where}, torch {torch.__version__}, fp16, {args.trials} trials per model and "
          "setting" + table(rows))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": where, "torch": torch.__version__, "trials": args.trials,
                       "rows": [asdict(r) for r in rows]}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
