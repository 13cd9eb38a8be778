#!/usr/bin/env bash
# Score the frozen system once on a held-out FastAPI set (HELDOUT_SET, default benchmarks/heldout/fastapi;
# the second, fresh set is benchmarks/heldout/fastapi2): never tune on what this prints. usage: benchmarks/heldout_evals.sh OUT_DIR [DATA_DIR] [-- extra `sunlib eval rag` options]
# The vaults are copied (read-only, as in the data folder, so their indexes live under $SUNLIB_HOME/indexes)
# to $HELDOUT_DIR/en and $HELDOUT_DIR/zh (default /work/heldout-run): the same paths reuse the same indexes.
set -euo pipefail
out=$(realpath -m "$1"); shift
data=$(realpath "${1:-../shared/data}"); [ $# -gt 0 ] && shift
[ "${1:-}" = "--" ] && shift
mkdir -p "$out"
cd "$(dirname "$0")/.."
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
runs=${HELDOUT_DIR:-/work/heldout-run}
set_dir=${HELDOUT_SET:-benchmarks/heldout/fastapi}
mkdir -p "$runs"
for lang in en zh; do
  [ -d "$runs/$lang" ] || cp -r "$data/fastapi_docs/$lang" "$runs/$lang"
  echo "== $lang: sunlib eval rag $set_dir/${lang}_vault.jsonl --vault $runs/$lang --json $*"
  python -m sunlib eval rag "$set_dir/${lang}_vault.jsonl" --vault "$runs/$lang" --json "$@" \
    > "$out/heldout_$lang.json"
done
