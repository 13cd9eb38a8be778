#!/usr/bin/env bash
# Score the frozen system once on the held-out FastAPI sets (benchmarks/heldout/fastapi): never tune on
# what this prints. usage: benchmarks/heldout_evals.sh OUT_DIR [DATA_DIR] [-- extra `sunlib eval rag` options]
# The vaults are copied to /tmp/fa-en and /tmp/fa-zh (the data folder is read-only), so the indexes that
# earlier runs built under $SUNLIB_HOME/indexes are reused.
set -euo pipefail
out=$(realpath -m "$1"); shift
data=$(realpath "${1:-../shared/data}"); [ $# -gt 0 ] && shift
[ "${1:-}" = "--" ] && shift
mkdir -p "$out"
cd "$(dirname "$0")/.."
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
for lang in en zh; do
  [ -d "/tmp/fa-$lang" ] || cp -r "$data/fastapi_docs/$lang" "/tmp/fa-$lang"
  echo "== $lang: sunlib eval rag benchmarks/heldout/fastapi/${lang}_vault.jsonl --vault /tmp/fa-$lang --json $*"
  python -m sunlib eval rag "benchmarks/heldout/fastapi/${lang}_vault.jsonl" --vault "/tmp/fa-$lang" --json "$@" \
    > "$out/heldout_$lang.json"
done
