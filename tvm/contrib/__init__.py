"""``tvm.contrib``: ``graph_executor``."""

from . import graph_executor  # noqa: F401
