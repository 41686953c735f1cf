#!/usr/bin/env bash
# Runs every fuzz target of the module for FUZZTIME each (default 10s):
# the hostile-input properties (docs/security.md) get new inputs on every
# CI run, beyond the seed corpora `go test` already replays. A failure
# leaves the failing input under the package's testdata/fuzz/ and exits 1.
set -euo pipefail
cd "$(dirname "$0")/.."
FUZZTIME=${FUZZTIME:-10s}
GO=${GO:-go}
status=0
for pkg in $($GO list ./...); do
  dir=$($GO list -f '{{.Dir}}' "$pkg")
  grep -lq '^func Fuzz' "$dir"/*_test.go 2>/dev/null || continue
  for target in $($GO test -list '^Fuzz' "$pkg" | grep '^Fuzz' || true); do
    echo "== fuzz $pkg $target ($FUZZTIME)"
    if ! $GO test -run '^$' -fuzz "^${target}\$" -fuzztime "$FUZZTIME" "$pkg" > /tmp/strata-fuzz.$$ 2>&1; then
      cat /tmp/strata-fuzz.$$
      status=1
    fi
  done
done
rm -f /tmp/strata-fuzz.$$
exit $status
