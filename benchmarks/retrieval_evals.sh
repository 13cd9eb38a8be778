#!/usr/bin/env bash
# Runs `sunlib eval retrieval` over models, modes and fusion settings for one dataset
# and appends one JSON line per run (the exact command + its metrics) to OUT.
# Vectors are cached per dataset and model under $SUNLIB_HOME/eval, so only the
# first run of each model embeds; an interrupted run resumes where it stopped.
#   usage: benchmarks/retrieval_evals.sh DATASET_DIR TUNE_SPLIT OUT.jsonl "MODELS"
#   e.g.   benchmarks/retrieval_evals.sh ../shared/data/scifact train docs/eval_runs.jsonl "use minilm e5"
set -euo pipefail
DS=$1
TUNE=$2
OUT=$3
MODELS=${4:-"use minilm e5"}
SUNLIB=${SUNLIB:-.venv/bin/sunlib}
run() {
  local cmd="sunlib eval retrieval $*"
  local json
  json=$($SUNLIB eval retrieval "$@" --json) || { echo "FAILED: $cmd" >&2; return 0; }
  python3 -c 'import json,sys; print(json.dumps({"command": sys.argv[1], **json.loads(sys.argv[2])}))' "$cmd" "$json" >> "$OUT"
  echo "$cmd -> $(echo "$json" | tr -d '\n ')"
}
run "$DS" --mode bm25
for p in $MODELS; do
  run "$DS" --mode dense --provider "$p"
done
# tune fusion on the tuning split with the multilingual default model, then report on test
for fusion in "rrf" "zscore 0.3" "zscore 0.5" "zscore 0.7"; do
  set -- $fusion
  if [ "$1" = rrf ]; then
    run "$DS" --split "$TUNE" --mode hybrid --provider e5 --fusion rrf
    run "$DS" --mode hybrid --provider e5 --fusion rrf
  else
    run "$DS" --split "$TUNE" --mode hybrid --provider e5 --fusion zscore --dense-weight "$2" --bm25-weight "$(python3 -c "print(round(1-$2,2))")"
    run "$DS" --mode hybrid --provider e5 --fusion zscore --dense-weight "$2" --bm25-weight "$(python3 -c "print(round(1-$2,2))")"
  fi
done
