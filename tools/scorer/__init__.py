"""Builds the answer scorer's parameters, ``src/sunlib/answer/gate/scorer.json`` (``python -m tools.scorer.train``)."""
