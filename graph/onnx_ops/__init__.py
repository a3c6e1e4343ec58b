"""ONNX operator converters beyond the core ones of ``graph/frontend_onnx.py``, one module per
family; each registers its converters with :func:`ptxforge.graph.frontend_onnx.register_converter`.
"""

from . import (  # noqa: F401  (registration)
    control_ops,
    linalg_ops,
    math_ops,
    nn_ops,
    qlinear_ops,
    quant_ops,
    rnn_ops,
    sampling_ops,
    sequence_ops,
    signal_ops,
    tensor_ops,
    vision_ops,
)
