# Strata's build. `make build` puts binaries in bin/, `make test` runs every
# test (unit and real-process), `make verify` is what CI checks besides tests.
GO        ?= go
BIN       := bin
CMDS      := metad bookie broker strata
STATICCHECK_VERSION := v0.8.2
# The MinIO server the object-store tests run as a child process (never
# linked: its licence is AGPL). Pinned; built from source, ~5 min once.
MINIO_VERSION := v0.0.0-20260212201848-7aac2a2c5b7c
GOBIN     := $(shell $(GO) env GOPATH)/bin
# Tests that start real processes share 2 cores with the race detector:
# give them room.
TEST_FLAGS ?= -race -count=1 -timeout 20m

.PHONY: all build test test-short lint verify proto bench run clean tools minio

all: build

build:
	CGO_ENABLED=0 $(GO) build -o $(BIN)/ $(addprefix ./cmd/,$(CMDS))

test:
	$(GO) test $(TEST_FLAGS) ./...

# Unit tests only: skips the tests that start real processes.
test-short:
	$(GO) test -short -count=1 ./...

tools:
	@test -x $(GOBIN)/staticcheck && $(GOBIN)/staticcheck -version | grep -q $(patsubst v%,%,$(STATICCHECK_VERSION)) || \
		GOFLAGS=-mod=mod $(GO) install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION)

# Installs the MinIO test server into $(GOBIN) when it is missing
# (internal/miniotest finds it there, or via STRATA_MINIO_BIN).
minio:
	@test -x $(GOBIN)/minio || \
		GOBIN=$(GOBIN) GOFLAGS=-mod=mod $(GO) install github.com/minio/minio@$(MINIO_VERSION)

lint: tools
	@unformatted=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
		if [ -n "$$unformatted" ]; then echo "gofmt needed:"; echo "$$unformatted"; exit 1; fi
	$(GO) vet ./...
	$(GOBIN)/staticcheck ./...

proto:
	./scripts/genproto.sh

# Fails when the committed generated code differs from what the pinned
# generators produce, or when go.mod/go.sum are not tidy.
verify: lint
	./scripts/verify.sh

bench:
	$(GO) test -run '^$$' -bench . -benchtime 3s ./...

# A local cluster of real processes (see README).
run: build
	./$(BIN)/strata dev

clean:
	rm -rf $(BIN)
