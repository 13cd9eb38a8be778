"""Embedding providers, one module per family."""
