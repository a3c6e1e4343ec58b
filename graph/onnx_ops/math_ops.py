"""ONNX converters of element-wise, comparison, logic, activation and reduction operators."""
