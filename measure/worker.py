"""``python -m ptxforge.measure.worker FD``: a pool worker in a fresh interpreter.

Started by :class:`~ptxforge.measure.pool.WorkerPool` with the ``exec`` method; ``FD`` is
this process's end of the pipe to the pool. The first message carries the initializer and
its arguments; then the worker takes jobs until the pipe closes.
"""

from __future__ import annotations

import os
import sys
from multiprocessing.connection import Connection

from .pool import _worker_main


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1 or not argv[0].isdigit():
        print("usage: python -m ptxforge.measure.worker FD (started by a WorkerPool)",
              file=sys.stderr)
        return 2
    conn = Connection(int(argv[0]))
    try:
        initializer, init_args = conn.recv()
    except EOFError:
        return 1
    _worker_main(conn, initializer, init_args)
    return 0


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    # skip interpreter shutdown: finalizers of GPU objects would call into a CUDA context
    # that a faulting kernel may have broken
    os._exit(code)
