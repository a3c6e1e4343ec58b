"""Callbacks for ``Tuner.tune``: each is called as ``callback(tuner, inputs, results)``
after every measured batch."""

from __future__ import annotations

import os
import sys
import time

from ..measure.record import RecordWriter


class _LogToFile:
    """See :func:`log_to_file`."""

    def __init__(self, path: str):
        self.path = path
        self._writer = RecordWriter(path)

    def on_result(self, inp, res) -> None:
        """Write one record now (the tuning loop calls this as each result arrives)."""
        self._writer.on_result(inp.to_measure(), res)

    def __call__(self, tuner, inputs, results) -> None:
        self._writer([i.to_measure() for i in inputs], results)

    @property
    def count(self) -> int:
        """Records written so far."""
        return self._writer.count

    def close(self) -> None:
        self._writer.close()


def log_to_file(file_out: str | os.PathLike) -> _LogToFile:
    """Append every measurement to a record file as it arrives (JSON lines, one ``write``
    per record, ``fsync`` per batch); a second process writing the same file raises
    :class:`~ptxforge.measure.record.RecordFileBusy`."""
    return _LogToFile(os.fspath(file_out))


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
