"""Callbacks for ``Tuner.tune``: each is called as ``callback(tuner, inputs, results)``
after every measured batch."""

from __future__ import annotations

import os
import sys
import time

from .record import save


def log_to_file(file_out: str | os.PathLike):
    """Append every measurement to a record file (JSON lines, flushed per record)."""
    path = os.fspath(file_out)
    folder = os.path.dirname(path)
    if folder:
        os.makedirs(folder, exist_ok=True)

    def _callback(tuner, inputs, results):
        save(path, inputs, results)

    _callback.path = path
    return _callback


def progress_bar(total: int, prefix: str = "", si_prefix: str = "G", stream=None):
    """Print one status line, rewritten after every batch: current and best throughput,
    trials done, seconds spent. Estimated results (simulator runner) say so."""
    scale = {"K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12}[si_prefix]
    state = {"ct": 0, "best": 0.0, "cur": 0.0, "start": time.time(), "estimated": False}

    def _callback(tuner, inputs, results):
        out = stream or sys.stdout
        for inp, res in zip(inputs, results):
            state["ct"] += 1
            if res.error_no == 0:
                flops = inp.task.flop / res.mean
                state["cur"] = flops
                state["best"] = max(state["best"], flops)
                state["estimated"] = state["estimated"] or res.estimated
            else:
                state["cur"] = 0.0
        est = " (estimated)" if state["estimated"] else ""
        cur, best = state["cur"] / scale, state["best"] / scale
        out.write(f"\r{prefix}Current/Best: {cur:7.2f}/{best:7.2f} "
                  f"{si_prefix}FLOPS{est} | Progress: ({state['ct']}/{total}) | "
                  f"{time.time() - state['start']:.2f} s")
        if state["ct"] >= total:
            out.write("\n")
        out.flush()

    return _callback


__all__ = ["log_to_file", "progress_bar"]
