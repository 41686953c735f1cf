#!/usr/bin/env bash
# Generates Go code from proto/**/*.proto into OUT (default: the repository),
# with the pinned generator versions. `make verify` runs it into a temporary
# directory and diffs, so stale generated code fails CI.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-.}
PROTOC_GEN_GO_VERSION=v1.36.12
PROTOC_GEN_GO_GRPC_VERSION=v1.6.2
PROTOC_VERSION="libprotoc 3.21.12"
gobin=$(go env GOPATH)/bin
if ! command -v protoc >/dev/null; then
  echo "protoc not found: apt-get install protobuf-compiler" >&2; exit 1
fi
if [ "$(protoc --version)" != "$PROTOC_VERSION" ]; then
  echo "protoc is $(protoc --version), want $PROTOC_VERSION" >&2; exit 1
fi
GOFLAGS=-mod=mod GOBIN="$gobin" go install google.golang.org/protobuf/cmd/protoc-gen-go@$PROTOC_GEN_GO_VERSION
GOFLAGS=-mod=mod GOBIN="$gobin" go install google.golang.org/grpc/cmd/protoc-gen-go-grpc@$PROTOC_GEN_GO_GRPC_VERSION
mkdir -p "$out"
PATH="$gobin:$PATH" protoc -I proto \
  --go_out="$out" --go_opt=module=github.com/strata-log/strata \
  --go-grpc_out="$out" --go-grpc_opt=module=github.com/strata-log/strata \
  $(find proto -name '*.proto' | sort)
