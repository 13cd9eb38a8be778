"""Builds the answer scorer's parameters, ``src/sunlib/answer/scorer.json`` (``python -m tools.scorer.train``)."""
