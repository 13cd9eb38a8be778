#!/usr/bin/env bash
# Re-measure the answer and retrieval figures of docs/evaluation.md's "Re-measured" table in one go.
# usage: benchmarks/answer_evals.sh OUT_DIR [DATA_DIR]   (one JSON file per figure set in OUT_DIR)
# Run it at two commits with the same SUNLIB_HOME to compare them; vectors are cached, so the second run
# embeds nothing. The SciFact e5 run embeds 5,183 abstracts the first time (hours of one core).
set -euo pipefail
out=$(realpath -m "$1"); data=$(realpath "${2:-../shared/data}"); mkdir -p "$out"
cd "$(dirname "$0")/.."
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
home=${SUNLIB_HOME:-$HOME/.local/share/sunlib}
run() { name=$1; shift; echo "== $name: sunlib $*"; python -m sunlib "$@" > "$out/$name.json"; }
rm -rf "$out/sample_vault" && cp -r src/sunlib/sample_vault "$out/sample_vault"
run sample_rag eval rag src/sunlib/qa/sample_vault.jsonl --vault "$out/sample_vault" --json
python -m benchmarks.qa_from_beir "$data/squad2_dev_half" --calibration 200 --test 300
S=$(ls -d "$home"/eval/squad2-dev-half-* | head -1)
run squad_cal eval calibrate "$S/qa/calibration.jsonl" --vault "$S/vault" --json
run squad_rag eval rag "$S/qa/test.jsonl" --vault "$S/vault" --json
python -m benchmarks.qa_from_beir "$data/cmrc2018" --test 500
C=$(ls -d "$home"/eval/cmrc2018-* | head -1)
run cmrc_rag eval rag "$C/qa/test.jsonl" --vault "$C/vault" --json
run cmrc_bm25 eval retrieval "$data/cmrc2018" --mode bm25 --json
run cmrc_hybrid eval retrieval "$data/cmrc2018" --mode hybrid --json
run scifact_bm25 eval retrieval "$data/scifact" --mode bm25 --json
run scifact_hybrid eval retrieval "$data/scifact" --mode hybrid --json
