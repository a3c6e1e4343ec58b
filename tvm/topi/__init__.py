"""``tvm.topi``: the operator library (``ptxforge.ops``), with ``topi.nn`` and
``topi.testing`` importable as modules (``from tvm.topi.testing import conv2d_nchw_python``)."""

from ...ops import *  # noqa: F401,F403
from . import nn, testing  # noqa: F401
