"""Builders of the artefacts that ship in the package (not installed; run from the repository root).

* ``tools.reader``: the reader model, ``src/sunlib/providers/readers/e5reader/``;
* ``tools.static``: the fast embedding tier, ``src/sunlib/providers/embedders/e5fast/``;
* ``tools.scorer``: the answer scorer's parameters, ``src/sunlib/answer/gate/scorer.json``.
"""
