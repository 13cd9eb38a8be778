#!/usr/bin/env bash
# Runs `sunlib eval retrieval` over the model / mode / fusion grid and appends one
# JSON line per run (command + metrics) to $OUT. Vectors are cached per dataset
# and model under $SUNLIB_HOME/eval, so only the first run of each model embeds.
#   usage: benchmarks/retrieval_evals.sh DATA_DIR OUT.jsonl [grid]
set -euo pipefail
DATA=${1:-../shared/data}
OUT=${2:-docs/eval_runs.jsonl}
GRID=${3:-all}
SUNLIB=${SUNLIB:-.venv/bin/sunlib}
run() {
  local cmd="sunlib eval retrieval $*"
  local json
  json=$($SUNLIB eval retrieval "$@" --json) || { echo "FAILED: $cmd" >&2; return 0; }
  python3 -c 'import json,sys; print(json.dumps({"command": sys.argv[1], **json.loads(sys.argv[2])}))' "$cmd" "$json" >> "$OUT"
  echo "$cmd -> $(echo "$json" | tr -d '\n ')"
}
models() {
  for ds in scifact cmrc2018; do
    for p in use minilm e5; do
      run "$DATA/$ds" --mode dense --provider "$p"
    done
    run "$DATA/$ds" --mode bm25
  done
}
fusion() {  # tuning grid on the train/trial splits; report on test
  for ds_split in "scifact train" "cmrc2018 trial"; do
    set -- $ds_split
    for p in e5 minilm; do
      run "$DATA/$1" --split "$2" --mode hybrid --provider "$p" --fusion rrf
      for w in 0.3 0.5 0.7; do
        run "$DATA/$1" --split "$2" --mode hybrid --provider "$p" --fusion zscore --dense-weight "$w" --bm25-weight "$(python3 -c "print(round(1-$w,2))")"
      done
    done
  done
}
case "$GRID" in
  models) models ;;
  fusion) fusion ;;
  all) models; fusion ;;
esac
