# hcasim — make targets. `make run` and `make test` are all a fresh machine
# with Go needs.
GO       ?= go
FUZZTIME ?= 30s
COUNT    ?= 6
BENCH    ?= .
PKGS     := ./...

.PHONY: all build lib lib-asan test race vet fuzz bench cross conform run speed clean

all: build

build: lib
	$(GO) build $(PKGS)
	$(GO) build -o bin/hcasim ./cmd/hcasim

# hcasim's libibverbs.so.1 (with libmlx5.so.1 and libefa.so.1 as links to
# it) in bin/lib, for unmodified RDMA programs (hcasim exec). It needs the
# rdma-core headers (Debian: libibverbs-dev); without them it is skipped,
# and so are the tests that run programs through it.
IBV_HDR ?= /usr/include/infiniband/verbs.h
lib:
	@if [ -f $(IBV_HDR) ] && [ -f /usr/include/infiniband/mlx5dv.h ]; then \
		$(MAKE) -s -C ibverbs/c OUT=$(CURDIR)/bin/lib GO=$(GO); \
	else \
		echo "make lib: skipped: no rdma-core headers ($(IBV_HDR)); install libibverbs-dev to build bin/lib/libibverbs.so.1"; \
	fi

# The same library built with AddressSanitizer and UndefinedBehaviorSanitizer
# (every report fatal) in bin/lib-asan. The programs stay unsanitized:
# frontendtest preloads libasan before them (HCASIM_SANITIZE=1).
SANFLAGS ?= -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer
lib-asan:
	@if [ -f $(IBV_HDR) ] && [ -f /usr/include/infiniband/mlx5dv.h ]; then \
		$(MAKE) -s -C ibverbs/c OUT=$(CURDIR)/bin/lib-asan GO=$(GO) \
			CFLAGS="-O1 -g $(SANFLAGS)" LDFLAGS="$(SANFLAGS)"; \
	else \
		echo "make lib-asan: skipped: no rdma-core headers ($(IBV_HDR))"; \
	fi

# The whole suite; the program suite (ibverbs) again on the sanitizer
# build of the front end, where any report fails the test; then the t10dif
# package again with the portable implementation forced (purego build tag).
test: lib
	$(GO) build -o bin/hcasim ./cmd/hcasim
	$(GO) test $(PKGS)
	HCASIM_SANITIZE=1 $(GO) test ./ibverbs/
	$(GO) test -tags purego ./t10dif/ ./testvectors/

race: lib
	$(GO) test -race $(PKGS)

# go vet runs asmdecl (assembly vs Go declarations) among its analyzers;
# vet the purego and 386/arm64 builds too.
vet:
	$(GO) vet $(PKGS)
	$(GO) vet -tags purego $(PKGS)
	GOARCH=386 $(GO) vet $(PKGS)
	GOARCH=arm64 $(GO) vet $(PKGS)

# Every Fuzz target of every package, FUZZTIME each (a duration, or a count
# such as 20000x); see scripts/fuzz.sh.
fuzz:
	./scripts/fuzz.sh $(FUZZTIME)

# Benchmarks, COUNT runs each, in a form benchstat reads.
bench:
	$(GO) test -run '^$$' -bench '$(BENCH)' -benchmem -count $(COUNT) $(PKGS)

# The fallbacks must compile where there is no assembly.
cross:
	GOARCH=arm64 $(GO) build $(PKGS)
	GOARCH=386 $(GO) build $(PKGS)
	$(GO) build -tags purego $(PKGS)

conform:
	$(GO) run ./cmd/hcasim conform testvectors

speed:
	$(GO) run ./cmd/hcasim speed

# The conformance vectors, an NVMe-oF-style integrity write and read
# through the model device (hcasim demo), then the device as a daemon on
# ./hcasim.sock until Ctrl-C (hcasim serve; SOCKET=path to move it).
SOCKET ?= hcasim.sock
run: conform
	$(GO) run ./cmd/hcasim demo
	$(GO) build -o bin/hcasim ./cmd/hcasim
	./bin/hcasim serve --socket $(SOCKET)

clean:
	rm -rf bin
