"""Answering: route, rerank, select + refuse, build context, write, cite + verify."""

from .pipeline import Asker

__all__ = ["Asker"]
