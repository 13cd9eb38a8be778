"""Answering: route, retrieve, rerank, select + refuse, build context, write, cite + verify."""

from .pipeline import Asker
from .result import AskResult

__all__ = ["AskResult", "Asker"]
