"""What the tests share besides fixtures: clients of the CLI and the app, parsers, store views, paths,
the test-only embedders, the e5 fixture's saved vectors, the browser, and the xdist scheduling.

Imported as ``tests.support.NAME`` (pyproject puts the repository root on the tests' ``sys.path``);
tests/conftest.py holds the fixtures themselves.
"""
