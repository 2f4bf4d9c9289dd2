# aspd developer targets. `make test` is what CI runs (see .ci/run).

GO     ?= go
BIN    ?= bin
ARGS   ?=

.PHONY: test test-race vet build run fmt walkthrough

## test: run every test (PostgreSQL tests need ASPD_TEST_DATABASE_URL or a local server)
test:
	$(GO) test ./...

## test-race: run every test with the race detector
test-race:
	$(GO) test -race ./...

## vet: go vet every package
vet:
	$(GO) vet ./...

## build: build bin/aspd and bin/aspctl
build:
	$(GO) build -o $(BIN)/aspd ./cmd/aspd
	$(GO) build -o $(BIN)/aspctl ./cmd/aspctl

## run: start aspd with the embedded store in ./aspd-data (extra flags: make run ARGS="--grace-window 10s")
run:
	$(GO) run ./cmd/aspd $(ARGS)

## walkthrough: run every shell block of README.md and docs/*.md against a fresh aspd (scripts/doc-walkthrough.sh)
walkthrough:
	scripts/doc-walkthrough.sh

## fmt: gofmt every Go file
fmt:
	gofmt -w .
