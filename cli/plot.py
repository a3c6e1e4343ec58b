"""``ptxforge plot``: tuning curves from a record file (best GFLOP/s against trials and
against time, one line per task), written as a PNG."""

from __future__ import annotations

import numpy as np


def curves(records) -> dict:
    """``{task name: (trials, best so far by trial, seconds, best so far by time,
    estimated)}`` (GFLOP/s)."""
    out: dict = {}
    t0 = None
    for inp, res in records:
        name = inp.task.name or inp.task.workload_key
        t0 = res.timestamp if t0 is None else min(t0, res.timestamp)
        c = out.setdefault(name, {"n": [], "t": [], "best": [], "g": [], "est": False})
        g = 0.0
        if res.error_no == 0 and res.costs:
            cost = sum(res.costs) / len(res.costs)
            g = inp.task.flop / cost / 1e9 if cost > 0 else 0.0
        prev = c["best"][-1] if c["best"] else 0.0
        c["n"].append(len(c["n"]) + 1)
        c["t"].append(res.timestamp)
        c["best"].append(max(prev, g))
        c["g"].append(g)
        c["est"] = c["est"] or res.estimated
    result = {}
    for k, v in out.items():
        n = np.array(v["n"])
        t = np.array(v["t"]) - (t0 or 0.0)
        best = np.array(v["best"])
        # over time, results count when they were measured (a batch measures out of order)
        order = np.argsort(t, kind="stable")
        per = np.array(v["g"])
        result[k] = (n, best, t[order], np.maximum.accumulate(per[order]), v["est"])
    return result


def plot_path(output: str) -> str:
    """The file the plot is written to: ``output``, with ``.png`` added when it has no
    extension (as matplotlib adds it). A folder is refused (matplotlib would write
    ``DIR.png`` next to it)."""
    import os

    if os.path.isdir(output):
        raise IsADirectoryError(f"{output} is a folder; give plot -o the name of a .png file")
    return output if os.path.splitext(output)[1] else output + ".png"


def plot_command(args) -> int:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise SystemExit(
            "plot needs matplotlib: pip install 'ptxforge[plot]' (or pip install matplotlib)"
        ) from None
    from ..measure import load_records

    out = plot_path(args.output)
    data = curves(load_records(args.log))
    if not data:
        raise SystemExit(f"{args.log} holds no records")
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(11, 4.2))
    any_est = False
    for name, (n, best, t, best_t, est) in data.items():
        label = name if len(name) <= 40 else name[:37] + "..."
        a1.plot(n, best, label=label, drawstyle="steps-post")
        a2.plot(t, best_t, label=label, drawstyle="steps-post")
        any_est = any_est or est
    unit = "GFLOP/s (estimated by the simulator model)" if any_est else "GFLOP/s"
    a1.set_xlabel("trials")
    a1.set_ylabel(f"best {unit}")
    a2.set_xlabel("tuning time (s)")
    a2.set_ylabel(f"best {unit}")
    a1.grid(alpha=0.3)
    a2.grid(alpha=0.3)
    if len(data) <= 12:
        a1.legend(fontsize=7)
    fig.suptitle(args.title or f"tuning curve: {args.log}")
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    print(f"wrote {out} ({len(data)} task(s))")
    return 0
