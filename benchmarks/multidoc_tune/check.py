#!/usr/bin/env python3
"""Validate the multi-document tuning sets (this folder) against the vaults they were written from,
with the rules of benchmarks/multidoc/check.py and at least 30 questions per set.

Usage:
    python3 benchmarks/multidoc_tune/check.py SAMPLE_VAULT_ROOT FASTAPI_DOCS_ROOT
"""

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "multidoc"))
import check  # noqa: E402  (benchmarks/multidoc/check.py)

if __name__ == "__main__":
    sys.exit(check.main(sys.argv, here=HERE, minimums=(30, 30)))
