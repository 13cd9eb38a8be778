"""Answering: route, retrieve, rerank, select + refuse, build context, write, cite + verify."""

from .pipeline import Asker, build_asker

__all__ = ["Asker", "build_asker"]
