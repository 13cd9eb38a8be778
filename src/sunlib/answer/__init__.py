"""Answering: route, retrieve, rerank, select + refuse, build context, write, cite + verify.

The pipeline (``pipeline.Asker``) is imported from its module, so that importing this package for
its result type (``result.AskResult``) loads no writer or judge.
"""
