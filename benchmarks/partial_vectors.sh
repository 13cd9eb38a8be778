#!/usr/bin/env bash
# Hybrid while vectors are missing (docs/evaluation.md): BM25, dense, and hybrid with the fill-in
# off and on, all on one cached eval index exactly as it is (`--as-is`: nothing is embedded).
# The cached index is copied to a temporary SUNLIB_HOME first, so no run can write to the original
# (the text sync and the search runs do write to the index they open). One JSON line per run on stdout.
#   usage: benchmarks/partial_vectors.sh DATASET_DIR [CACHE_DIR]
#   e.g.   SUNLIB_HOME=/work/evalhome benchmarks/partial_vectors.sh ../shared/data/scifact
# CACHE_DIR defaults to the only $SUNLIB_HOME/eval/<dataset name>-* folder.
set -euo pipefail
ds=$(realpath "$1")
home=${SUNLIB_HOME:-$HOME/.local/share/sunlib}
if [ $# -ge 2 ]; then
  cache=$(realpath "$2")
else
  matches=("$home"/eval/"$(basename "$ds")"-*)
  [ ${#matches[@]} -eq 1 ] && [ -d "${matches[0]}" ] || { echo "give CACHE_DIR: found ${matches[*]}" >&2; exit 2; }
  cache=${matches[0]}
fi
cd "$(dirname "$0")/.."
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
copy=$(mktemp -d)
trap 'rm -rf "$copy"' EXIT
mkdir -p "$copy/eval" && cp -a "$cache" "$copy/eval/"
run() {
  local json
  json=$(SUNLIB_HOME="$copy" python -m sunlib eval retrieval "$ds" "$@" --as-is --json)
  python -c 'import json,sys; print(json.dumps({"command": sys.argv[1], **json.loads(sys.argv[2])}))' \
    "sunlib eval retrieval $ds $* --as-is" "$json"
}
run --mode bm25
run --mode dense
run --mode hybrid --no-fill-missing
run --mode hybrid
