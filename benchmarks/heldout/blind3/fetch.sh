#!/usr/bin/env bash
# Reproduce vault_en/ and vault_zh/ from the npm registry (mand-mobile, Apache-2.0).
# Usage: bash fetch.sh   (run from anywhere; writes next to this script)
set -euo pipefail

PKG=mand-mobile
VERSION=2.7.0
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT

cd "$TMP"
npm pack --silent "${PKG}@${VERSION}" >/dev/null
tar xzf "${PKG}-${VERSION}.tgz"          # unpacks into ./package/
SRC="$TMP/package"

EN="$HERE/vault_en"
ZH="$HERE/vault_zh"
rm -rf "$EN" "$ZH"
mkdir -p "$EN/components" "$ZH/components"

# Top-level pages. English: README.md, CHANGELOG.en-US.md; Chinese: README.zh-CN.md, CHANGELOG.md
cp "$SRC/README.md"          "$EN/README.md"
cp "$SRC/CHANGELOG.en-US.md" "$EN/CHANGELOG.en-US.md"
cp "$SRC/README.zh-CN.md"    "$ZH/README.zh-CN.md"
cp "$SRC/CHANGELOG.md"       "$ZH/CHANGELOG.md"

# Component pages (components/<name>/README.en-US.md is English, README.md is Chinese).
# lib/ and lib-vw/ carry identical copies, so only components/ is used.
for d in "$SRC"/components/*/; do
  name="$(basename "$d")"
  if [ -f "$d/README.en-US.md" ]; then
    mkdir -p "$EN/components/$name"
    cp "$d/README.en-US.md" "$EN/components/$name/README.en-US.md"
  fi
  if [ -f "$d/README.md" ]; then
    mkdir -p "$ZH/components/$name"
    cp "$d/README.md" "$ZH/components/$name/README.md"
  fi
done

cp "$SRC/LICENSE" "$HERE/LICENSE.upstream"

echo "vault_en: $(find "$EN" -name '*.md' | wc -l) .md files"
echo "vault_zh: $(find "$ZH" -name '*.md' | wc -l) .md files"
