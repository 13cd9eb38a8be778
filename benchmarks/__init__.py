"""Performance and quality measurements: each script runs from the repository root as ``python -m benchmarks.NAME``.

``benchmarks.common`` holds what several of them share (the repository's paths, a free port, the writer of a
block in docs/benchmarks.md). The data folders beside them are question sets and training data, not code:
``heldout/``, ``multidoc/``, ``multidoc_tune/``, ``trainsets/`` and ``grader_verdicts.jsonl``.
"""
