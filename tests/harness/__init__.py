"""Harnesses the tests import: the kill trials, the API fuzz, the hostile frontmatter and the fake
OpenAI-compatible chat server.

The tests import them as ``tests.harness.<name>`` (the repository root is on ``sys.path``: pyproject's
``pythonpath``). The kill trials, the fuzz and the hostile frontmatter also run at full size on their
own, from the repository root: ``python -m tests.harness.kill_trials``, ``python -m tests.harness.fuzz_api``
(``make fuzz``), ``python -m tests.harness.hostile_yaml``. ``benchmarks.load_api`` serves the fake chat
server as its slow LLM writer.
"""
