"""``tvm.testing``: ``assert_allclose``."""

from numpy.testing import assert_allclose

__all__ = ["assert_allclose"]
