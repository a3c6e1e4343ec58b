"""ONNX converters of indexing, data-movement, convolution, pooling and normalization
operators."""
