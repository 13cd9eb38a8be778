"""Providers, chosen by name from config through one registry."""

from .registry import EMBEDDERS, Embedder, create_embedder, register_embedder

__all__ = ["EMBEDDERS", "Embedder", "create_embedder", "register_embedder"]
