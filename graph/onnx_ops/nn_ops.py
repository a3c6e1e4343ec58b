"""ONNX converters of convolution, pooling, normalization and resizing operators."""
