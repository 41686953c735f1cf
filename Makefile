# Strata's build. `make build` puts binaries in bin/, `make test` runs every
# test (unit and real-process), `make verify` is what CI checks besides tests.
GO        ?= go
BIN       := bin
CMDS      := metad bookie broker strata
GOBIN     := $(firstword $(subst :, ,$(shell $(GO) env GOPATH)))/bin
# Tests that start real processes share 2 cores with the race detector:
# give them room.
TEST_FLAGS ?= -race -count=1 -timeout 30m

# Container images (deploy/docker, docs/deploy.md): strata:$(IMAGE_TAG) holds
# the four static binaries, strata-minio:$(IMAGE_TAG) the pinned MinIO built
# without cgo (the `make minio` binary links libc, and an image FROM scratch
# has none) into its own directory.
IMAGE_TAG   ?= dev
IMAGE_CTX   := $(BIN)/images
MINIO_STATIC_DIR := $(firstword $(subst :, ,$(shell $(GO) env GOPATH)))/minio-static
DOCKER      ?= docker

.PHONY: all build deps test test-short test-long lint verify proto bench bench-cluster run clean tools minio minio-static images image-strata image-minio fuzz chaos soak

all: build

# Installs what the goals on the command line need when it is missing, at
# pinned versions: MinIO, helm, promtool, kcat and the Python Kafka clients
# for test, MinIO for run, protoc and staticcheck for verify and proto
# (scripts/deps.sh; silent when everything is there). One call per `make`,
# so one `apt-get update` serves every goal. `make deps` installs all.
deps:
	@./scripts/deps.sh $(MAKECMDGOALS)

build:
	CGO_ENABLED=0 $(GO) build -o $(BIN)/ $(addprefix ./cmd/,$(CMDS))

# The container tests run after the rest, not beside the real-process
# tests in e2e: both load the 2 cores for minutes.
# Allocation bounds, which the race detector voids (it pads allocations and
# drops pooled objects): the tests named for them (Alloc, Bomb) run again
# without it, in the packages whose tests ask internal/racedetect or
# internal/alloctest.
ALLOC_PKGS = $$($(GO) list -f '{{.ImportPath}} {{.TestImports}} {{.XTestImports}}' ./... | grep -E '/internal/(racedetect|alloctest)( |\]|$$)' | cut -d' ' -f1)

test: deps
	$(GO) test $(TEST_FLAGS) $$($(GO) list ./... | grep -v /deploy/containertest)
	$(GO) test -count=1 -run 'Alloc|Bomb' $(ALLOC_PKGS)
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

# staticcheck alone.
tools: deps

# The MinIO test server alone, into $(GOBIN) (internal/miniotest finds it
# there, or via STRATA_MINIO_BIN); built from source, ~5 min once.
minio: deps

# The static MinIO the strata-minio image holds (~5 min once).
minio-static: deps

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

image-minio: deps
	rm -rf $(IMAGE_CTX)/minio
	mkdir -p $(IMAGE_CTX)/minio/bin $(IMAGE_CTX)/minio/data/strata $(IMAGE_CTX)/minio/empty
	CGO_ENABLED=0 $(GO) build -trimpath -o $(IMAGE_CTX)/minio/bin/ ./cmd/strata
	cp $(MINIO_STATIC_DIR)/minio $(IMAGE_CTX)/minio/bin/
	$(DOCKER) build -q -t strata-minio:$(IMAGE_TAG) -f deploy/docker/minio.Dockerfile $(IMAGE_CTX)/minio

# Every fuzz target for FUZZTIME each (scripts/fuzz.sh); CI runs it.
fuzz:
	./scripts/fuzz.sh

lint: deps
	@unformatted=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
		if [ -n "$$unformatted" ]; then echo "gofmt needed:"; echo "$$unformatted"; exit 1; fi
	$(GO) vet ./...
	$(GOBIN)/staticcheck ./...

proto: deps
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

# The nemesis (docs/reliability.md): a cluster under randomized faults,
# every record checked. `make chaos` is a short run, a fixed seed set;
# `make soak DURATION=1h SEED=N REPORT=file.json` a long one. Both need
# root (network namespaces, iptables, loop-mounted disks).
CHAOS_SEEDS    ?= 1 2
CHAOS_DURATION ?= 60s
chaos: deps build
	@for seed in $(CHAOS_SEEDS); do \
		./$(BIN)/strata chaos --seed $$seed --duration $(CHAOS_DURATION) --name sc$$seed || exit 1; \
	done

DURATION ?= 1h
SEED     ?= 1
REPORT   ?= soak-report.json
soak: deps build
	./$(BIN)/strata chaos --seed $(SEED) --duration $(DURATION) --report $(REPORT)

# A local cluster of real processes (see README).
run: deps build
	./$(BIN)/strata dev

clean:
	rm -rf $(BIN)
