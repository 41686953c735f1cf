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

# Container images (deploy/docker, docs/deploy.md): strata:$(IMAGE_TAG) holds
# the four static binaries, strata-minio:$(IMAGE_TAG) the pinned MinIO built
# without cgo (the `make minio` binary links libc, and an image FROM scratch
# has none) into its own directory.
IMAGE_TAG   ?= dev
IMAGE_CTX   := $(BIN)/images
MINIO_STATIC_DIR := $(shell $(GO) env GOPATH)/minio-static
DOCKER      ?= docker

.PHONY: all build test test-short test-long lint verify proto bench bench-cluster run clean tools minio minio-static images image-strata image-minio fuzz

all: build

build:
	CGO_ENABLED=0 $(GO) build -o $(BIN)/ $(addprefix ./cmd/,$(CMDS))

# The container tests run after the rest, not beside the real-process
# tests in e2e: both load the 2 cores for minutes.
test:
	$(GO) test $(TEST_FLAGS) $$($(GO) list ./... | grep -v /deploy/containertest)
	$(GO) test $(TEST_FLAGS) ./deploy/containertest/
	cd deploy/helm/chartcheck && $(GO) test -count=1 ./...
	./deploy/monitoring/check.sh

# Unit tests only: skips the tests that start real processes.
test-short:
	$(GO) test -short -count=1 ./...

# The long tests (CI does not run them): 50,000 partitions, a failover of
# half of them (STRATA_SCALE_PARTITIONS sets the count).
test-long:
	STRATA_LONG=1 $(GO) test -count=1 -timeout 90m -run 'TestLong' -v ./e2e/

tools:
	@test -x $(GOBIN)/staticcheck && $(GOBIN)/staticcheck -version | grep -q $(patsubst v%,%,$(STATICCHECK_VERSION)) || \
		GOFLAGS=-mod=mod $(GO) install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION)

# Installs the MinIO test server into $(GOBIN) when it is missing
# (internal/miniotest finds it there, or via STRATA_MINIO_BIN).
minio:
	@test -x $(GOBIN)/minio || \
		GOBIN=$(GOBIN) GOFLAGS=-mod=mod $(GO) install github.com/minio/minio@$(MINIO_VERSION)

# The static MinIO the strata-minio image holds (~5 min once).
minio-static:
	@test -x $(MINIO_STATIC_DIR)/minio || \
		CGO_ENABLED=0 GOBIN=$(MINIO_STATIC_DIR) GOFLAGS=-mod=mod $(GO) install github.com/minio/minio@$(MINIO_VERSION)

# Builds strata:$(IMAGE_TAG) and strata-minio:$(IMAGE_TAG) FROM scratch (no
# base image is pulled). The build contexts are small directories under
# $(IMAGE_CTX), not the repository.
# image-strata alone is what the container tests need (no MinIO build).
images: image-strata image-minio

image-strata:
	rm -rf $(IMAGE_CTX)/strata
	mkdir -p $(IMAGE_CTX)/strata/bin $(IMAGE_CTX)/strata/empty
	CGO_ENABLED=0 $(GO) build -trimpath -o $(IMAGE_CTX)/strata/bin/ $(addprefix ./cmd/,$(CMDS))
	$(DOCKER) build -q -t strata:$(IMAGE_TAG) -f deploy/docker/strata.Dockerfile $(IMAGE_CTX)/strata

image-minio: minio-static
	rm -rf $(IMAGE_CTX)/minio
	mkdir -p $(IMAGE_CTX)/minio/bin $(IMAGE_CTX)/minio/data/strata $(IMAGE_CTX)/minio/empty
	CGO_ENABLED=0 $(GO) build -trimpath -o $(IMAGE_CTX)/minio/bin/ ./cmd/strata
	cp $(MINIO_STATIC_DIR)/minio $(IMAGE_CTX)/minio/bin/
	$(DOCKER) build -q -t strata-minio:$(IMAGE_TAG) -f deploy/docker/minio.Dockerfile $(IMAGE_CTX)/minio

# Every fuzz target for FUZZTIME each (scripts/fuzz.sh); CI runs it.
fuzz:
	./scripts/fuzz.sh

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

# The standard benchmark: starts its own local cluster, measures the
# machine's limits, runs the workloads, writes bench-report.json and .txt
# (docs/bench/README.md). E.g. BENCH_FLAGS='--brokers 1,2 --duration 20s'.
BENCH_FLAGS ?=
bench-cluster: build
	./$(BIN)/strata bench suite $(BENCH_FLAGS)

# A local cluster of real processes (see README).
run: build
	./$(BIN)/strata dev

clean:
	rm -rf $(BIN)
