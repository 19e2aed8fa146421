# mesh: one binary that runs a fleet of your own machines.
GO        ?= go
BIN       := bin/mesh
STATE     ?= $(CURDIR)/mesh-state
ROOT      ?= $(CURDIR)/mesh-root
DNS       ?= 127.0.0.1:5353
MESH      ?= home
NODE      ?= $(shell hostname -s 2>/dev/null | tr 'A-Z_.' 'a-z--' | cut -c1-63 | grep -E '^[a-z0-9]([a-z0-9-]*[a-z0-9])?$$' || echo node1)
STATICCHECK := $(shell $(GO) env GOPATH)/bin/staticcheck

.PHONY: build run test check bench tidy-check clean example-images

build: ## a static bin/mesh
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags='-s -w' -o $(BIN) .

# Flags given to make run on a restart (ROOT=..., DNS=...) override what the
# mesh keeps in $(STATE)/config.yaml; the defaults do not.
RESTART_FLAGS = $(if $(filter command line environment,$(origin ROOT)),--root $(ROOT)) \
                $(if $(filter command line environment,$(origin DNS)),--dns $(DNS))

# One-node mesh in ./mesh-state: genesis the first time, the same mesh again
# after, with the flags it was made with (kept in $(STATE)/config.yaml).
run: build
	@if [ -f $(STATE)/controller/mesh.db ]; then \
		exec $(BIN) controller --dir $(STATE) $(RESTART_FLAGS); \
	else \
		mkdir -p $(ROOT) && \
		exec $(BIN) genesis --dir $(STATE) --mesh $(MESH) --node $(NODE) --bus 127.0.0.1:4222 --http 127.0.0.1:8480 --root $(ROOT) --dns $(DNS); \
	fi

# -timeout: the e2e package runs past go test's default 10 minutes when
# MESH_TEST_FLEET=1 joins its 1,200 simulated hosts (as .ci/run does).
# -p and -parallel: 8 packages at once and 16 tests at once in each, not
# go test's default of the number of CPUs: most tests wait on processes,
# the engine or the clock rather than on this machine's cores. -parallel
# overrides what a package's TestMain asks for: 16 is what the end-to-end
# tests ask, and they are the longest package (at 8 its longest tests
# start last, and the package takes half as long again).
# -ldflags=-w: test binaries without DWARF (stack traces keep their files
# and lines), a quarter less CPU for each of the ~20 links a run makes;
# -vet=off: go vet ./... has just run every check go test would.
test:
	$(GO) vet ./...
	$(GO) test -count=1 -vet=off -ldflags=-w -p 8 -parallel 16 -timeout 30m ./...

check: tidy-check
	$(GO) vet ./...
	@test -x $(STATICCHECK) || $(GO) install honnef.co/go/tools/cmd/staticcheck@v0.8.2
	$(STATICCHECK) ./...
	$(GO) test -race -count=1 ./...

tidy-check:
	@cp go.mod /tmp/mesh-go.mod.bak; cp go.sum /tmp/mesh-go.sum.bak
	@$(GO) mod tidy
	@if ! cmp -s go.mod /tmp/mesh-go.mod.bak || ! cmp -s go.sum /tmp/mesh-go.sum.bak; then \
		cp /tmp/mesh-go.mod.bak go.mod; cp /tmp/mesh-go.sum.bak go.sum; \
		echo "go.mod or go.sum is not tidy: run go mod tidy and commit the result"; exit 1; fi

bench: build
	$(GO) test -run '^$$' -bench . -benchmem ./...
	bench/figures.sh 3

# The container examples' images, FROM scratch around the machine's static
# busybox and meshtls (examples/meshtls, built static here: the TLS server
# and verifying fetcher the modules run; no registry needed), saved beside
# each module.json as the archive it names. The classic builder
# (DOCKER_BUILDKIT=0) needs no buildx; the context is a temporary directory
# so no binary lands in the tree.
DOCKER        ?= docker
BUSYBOX       ?= /bin/busybox
EXAMPLE_IMAGES := web client authweb authclient

example-images: ## examples/{web,client,authweb,authclient}/NAME.tar
	@test -x $(BUSYBOX) || { echo "$(BUSYBOX) is missing: install busybox-static"; exit 1; }
	@set -e; tmp=$$(mktemp -d); trap 'rm -rf "$$tmp"' EXIT; \
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags='-s -w' -o "$$tmp/meshtls" ./examples/meshtls; \
	for ex in $(EXAMPLE_IMAGES); do \
		ctx="$$tmp/$$ex"; mkdir "$$ctx"; \
		cp examples/$$ex/Dockerfile $(BUSYBOX) "$$tmp/meshtls" "$$ctx"/; \
		echo "build mesh-example/$$ex:1"; \
		DOCKER_BUILDKIT=0 $(DOCKER) build -q -t mesh-example/$$ex:1 "$$ctx" >/dev/null; \
		$(DOCKER) save -o examples/$$ex/$$ex.tar mesh-example/$$ex:1; \
		echo "saved examples/$$ex/$$ex.tar"; \
	done

clean:
	rm -rf bin
