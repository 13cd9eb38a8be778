"""Rerankers: ``lexical`` (explained rule bonuses) and ``cross-encoder`` (a local ONNX model)."""
