#!/usr/bin/env bash
# Fails when generated protobuf code is stale or go.mod is not tidy.
set -euo pipefail
cd "$(dirname "$0")/.."
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
./scripts/genproto.sh "$tmp"
stale=0
while IFS= read -r f; do
  rel=${f#"$tmp"/}
  if ! cmp -s "$f" "$rel"; then echo "stale generated file: $rel (run make proto)"; stale=1; fi
done < <(find "$tmp" -name '*.go')
for f in $(git ls-files 'proto/*.pb.go'); do
  [ -f "$tmp/$f" ] || { echo "generated file without a .proto: $f"; stale=1; }
done
cp go.mod "$tmp/go.mod.before"; cp go.sum "$tmp/go.sum.before"
go mod tidy
if ! cmp -s go.mod "$tmp/go.mod.before" || ! cmp -s go.sum "$tmp/go.sum.before"; then
  echo "go.mod/go.sum not tidy (run go mod tidy)"; git --no-pager diff --stat go.mod go.sum || true; stale=1
fi
exit $stale
