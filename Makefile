# hcasim — make targets. `make run` and `make test` are all a fresh machine
# with Go needs.
GO       ?= go
FUZZTIME ?= 30s
COUNT    ?= 6
BENCH    ?= .
PKGS     := ./...

.PHONY: all build test race vet fuzz bench cross conform run speed clean

all: build

build:
	$(GO) build $(PKGS)
	$(GO) build -o bin/hcasim ./cmd/hcasim

# The whole suite, then the t10dif package again with the portable
# implementation forced (purego build tag).
test:
	$(GO) test $(PKGS)
	$(GO) test -tags purego ./t10dif/ ./testvectors/

race:
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
