#!/usr/bin/env bash
# The reader's whole-path figures (docs/evaluation.md, "The reader"), before and after in one run.
# usage: benchmarks/reader_evals.sh tune|report OUT_DIR [DATA_DIR]
#
#   tune:   the tuning sets, with the reader gate at threshold 0 (it never refuses), so that
#           benchmarks/reader_sweep.py can read each question's reader probability: the bundled
#           calibration set on the sample vault, and the first FastAPI held-out set (both vaults).
#   report: the report sets, never tuned on, with default settings ("after") and with the path
#           before the reader ("before": [answer] reader = "none", gate = "score"): the second blind
#           FastAPI set (benchmarks/heldout/fastapi2) and the blind mand-mobile vault
#           (benchmarks/heldout/blind3; `bash benchmarks/heldout/blind3/fetch.sh` fetches it from npm).
#
# The vaults are copied to $HELDOUT_DIR (default /work/heldout-run), so their indexes are reused.
set -euo pipefail
what=$1
out=$(realpath -m "$2")
data=$(realpath "${3:-../shared/data}")
cd "$(dirname "$0")/.."
mkdir -p "$out"
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
runs=${HELDOUT_DIR:-/work/heldout-run}
mkdir -p "$runs"
for lang in en zh; do
  [ -d "$runs/$lang" ] || cp -r "$data/fastapi_docs/$lang" "$runs/$lang"
done
[ -d "$runs/sample" ] || cp -r src/sunlib/sample_vault "$runs/sample"
blind=benchmarks/heldout/blind3
if [ ! -d "$blind/vault_en" ]; then bash "$blind/fetch.sh"; fi
for lang in en zh; do [ -d "$runs/b3$lang" ] || cp -r "$blind/vault_$lang" "$runs/b3$lang"; done

run() {  # name qa vault [env...]
  local name=$1 qa=$2 vault=$3; shift 3
  echo "== $name: $* sunlib eval rag $qa --vault $vault --json --no-save"
  env "$@" python -m sunlib eval rag "$qa" --vault "$vault" --json --no-save > "$out/$name.json"
}

case "$what" in
  tune)
    run calibration src/sunlib/qa/sample_vault_calibration.jsonl "$runs/sample" SUNLIB_ANSWER__GATE=reader SUNLIB_ANSWER__READER_THRESHOLD=0
    run fastapi1-en benchmarks/heldout/fastapi/en_vault.jsonl "$runs/en" SUNLIB_ANSWER__GATE=reader SUNLIB_ANSWER__READER_THRESHOLD=0
    run fastapi1-zh benchmarks/heldout/fastapi/zh_vault.jsonl "$runs/zh" SUNLIB_ANSWER__GATE=reader SUNLIB_ANSWER__READER_THRESHOLD=0
    ;;
  report)
    before=(SUNLIB_ANSWER__READER=none SUNLIB_ANSWER__GATE=score)
    for set in fastapi2:en:en fastapi2:zh:zh blind3:en:b3en blind3:zh:b3zh; do
      IFS=: read -r name lang vault <<< "$set"
      qa=benchmarks/heldout/$name/${lang}_vault.jsonl
      run "$name-$lang-before" "$qa" "$runs/$vault" "${before[@]}"
      run "$name-$lang-after" "$qa" "$runs/$vault" OMP_NUM_THREADS=1
    done
    ;;
  *) echo "usage: $0 tune|report OUT_DIR [DATA_DIR]" >&2; exit 2 ;;
esac
