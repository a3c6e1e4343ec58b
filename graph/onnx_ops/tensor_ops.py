"""ONNX converters of indexing and data-movement operators (gathers, scatters, slices,
tiling, padding, products written as einsum)."""
