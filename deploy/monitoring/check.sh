#!/usr/bin/env bash
# Checks the Prometheus alert rules: `promtool check rules` and the unit
# tests in alerts_test.yaml. Run by `make test`. Skips, saying so, when
# promtool is missing, unless STRATA_REQUIRE_PROMTOOL=1 (.ci/run sets it).
# `make test` installs it (Debian's prometheus package) where it may.
set -euo pipefail
cd "$(dirname "$0")"
if ! command -v promtool >/dev/null; then
  if [ "${STRATA_REQUIRE_PROMTOOL:-0}" = 1 ]; then
    echo "deploy/monitoring: promtool not found and STRATA_REQUIRE_PROMTOOL=1" >&2
    exit 1
  fi
  echo "deploy/monitoring: SKIP: promtool not found; alert rules not checked" \
    "(install: sudo apt-get install -y --no-install-recommends prometheus)"
  exit 0
fi
promtool check rules alerts.yaml
promtool test rules alerts_test.yaml
# The dashboards' queries must parse too: check them as recording rules
# (Grafana's $__rate_interval becomes 5m).
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
n=0
{
  echo "groups:"
  for f in grafana/*.json; do
    echo "  - name: $(basename "$f" .json)"
    echo "    rules:"
    grep -o '"expr": ".*"' "$f" | sed -e 's/^"expr": //' -e 's/\$__rate_interval/5m/g' |
      while IFS= read -r expr; do
        n=$((n + 1))
        echo "      - record: dashboard:query_$n"
        echo "        expr: $expr"
      done
  done
} >"$tmp/dashboards.yaml"
promtool check rules --lint=none "$tmp/dashboards.yaml" >/dev/null 2>&1 ||
  { promtool check rules --lint=none "$tmp/dashboards.yaml"; exit 1; }
echo "dashboard queries: OK ($(grep -c 'expr:' "$tmp/dashboards.yaml") queries)"
