"""Hugging Face BERT-base or GPT-2 small (SDPA attention) imported with ``graph.from_torch``,
built in fp16 with the default schedules, fused attention off and on, against
``torch.compile(mode="reduce-overhead")`` and PyTorch's own CUDA graph in one process on one
GPU. Each build is checked against eager fp32 on random token ids before it is timed
(``GraphModule.benchmark``: one CUDA graph, median of 5 repeats of at least 300 ms).

    python3 bench/bench_from_torch.py bert:1:128 bert:8:512 gpt2:1:1024   # model:batch:seq
    python3 bench/bench_from_torch.py --profile 10 gpt2:1:1024   # + where the time goes
"""
import argparse
import os
import sys
import time
import warnings

import numpy as np
import ptxforge
import torch
import transformers
from ptxforge import graph
from ptxforge.graph.torch_reference import cuda_graph, time_cuda


def run(model_name: str, b: int, s: int, flags, profile: int = 0) -> None:
    """Import, build with each ``fused_attention`` flag, check, time, print."""
    torch.manual_seed(0)
    if model_name == "bert":
        cfg = transformers.BertConfig(attn_implementation="sdpa")
        m = transformers.BertModel(cfg)
    else:
        # no key/value cache in the outputs: torch.export cannot return a DynamicCache
        cfg = transformers.GPT2Config(attn_implementation="sdpa", use_cache=False)
        m = transformers.GPT2Model(cfg)
    m.config.return_dict = False
    m = m.eval()
    ids = torch.randint(0, cfg.vocab_size, (b, s))
    t0 = time.perf_counter()
    net, params = graph.from_torch(m, (ids,))
    print(f"[{model_name} b{b} s{s}] imported in {time.perf_counter()-t0:.1f} s", flush=True)
    with torch.no_grad():
        mc = m.cuda()
        ref = mc(ids.cuda())[0].float().cpu().numpy()
        mh = mc.half()
        lo = mh(ids.cuda())[0].float().cpu().numpy()
    scale = float(np.abs(ref).max())
    torch_err = float(np.abs(lo - ref).max()) / scale
    print(f"  PyTorch fp16 differs from fp32 by {torch_err:.2e}", flush=True)
    dev = ptxforge.cuda(0)
    res = {}
    for fa in flags:
        t0 = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            lib = graph.build(net, "cuda", params, precision="float16", fused_attention=fa)
        n = sum(1 for k in lib.call_keys if k is not None)
        mod = graph.GraphModule(lib, dev)
        mod.set_input(input_ids=ids.numpy())
        mod.run()
        out = mod.get_output(0).numpy().astype(np.float32)
        err = float(np.abs(out - ref).max()) / scale
        if err > max(5 * torch_err, 1e-2):
            raise SystemExit(f"{model_name}: fused_attention={fa} differs from eager fp32 by "
                             f"{err:.2e} of the largest output")
        ms = mod.benchmark(dev, repeat=5, min_repeat_ms=300).median * 1e3
        res[fa] = ms
        print(f"  fused_attention={fa}: built {time.perf_counter()-t0:.0f} s, {n} launches, "
              f"err {err:.2e}, {ms:.4f} ms", flush=True)
        if profile:
            sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
            from bench_hf_onnx import kernel_profile

            plain = graph.GraphModule(lib, dev, use_cuda_graph=False, dependent_launch=False)
            print(kernel_profile(torch, plain, lib, {"input_ids": ids.numpy()}, profile),
                  flush=True)
    ids_c = ids.cuda()
    with torch.no_grad():
        comp = torch.compile(mh, mode="reduce-overhead")
        for _ in range(5):
            comp(ids_c)
        torch.cuda.synchronize()
        tc = time_cuda(torch, lambda: comp(ids_c), 300, 5) * 1e3
        tg = time_cuda(torch, cuda_graph(torch, lambda: mh(ids_c)), 300, 5) * 1e3
    print(f"  torch.compile(reduce-overhead) {tc:.4f} ms, eager CUDA graph {tg:.4f} ms; "
          + ", ".join(f"fa={k}: {tc/v:.2f}x" for k, v in res.items()), flush=True)
    torch._dynamo.reset()

if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("specs", nargs="+", help="model:batch:seq, model bert or gpt2")
    p.add_argument("--profile", type=int, default=0,
                   help="print the N fused functions that take longest (CUDA profiler)")
    args = p.parse_args()
    for spec in args.specs:
        name, b, s = spec.split(":")
        if name not in ("bert", "gpt2"):
            raise SystemExit(f"unknown model {name!r} in {spec!r}: bert or gpt2")
        run(name, int(b), int(s), (False, True), args.profile)
