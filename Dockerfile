# Base images are build arguments so that mirror and air-gapped users can
# name their own (deploy/test-compose.sh builds stand-ins from Debian
# packages and passes them this way). No "# syntax=" line: it would make
# BuildKit pull a frontend image, which an air-gapped host cannot.
#
#   GO_IMAGE       a Go toolchain (go on PATH), 1.26 or newer
#   RUNTIME_IMAGE  a static runtime: CA certificates, a user 65532
ARG GO_IMAGE=golang:1.26
ARG RUNTIME_IMAGE=gcr.io/distroless/static-debian12:nonroot

# Build: static binaries (pure Go: the SQLite driver needs no cgo).
FROM ${GO_IMAGE} AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ENV CGO_ENABLED=0
# The Go build cache persists across builds in a cache mount (BuildKit,
# Docker's default builder, and podman/buildah): a rebuild after a source
# change compiles only what changed, not every dependency again.
RUN --mount=type=cache,target=/root/.cache/go-build \
    go build -trimpath -ldflags="-s -w" -o /out/aspd ./cmd/aspd \
 && go build -trimpath -ldflags="-s -w" -o /out/aspctl ./cmd/aspctl \
 && mkdir -p /out/data

# Run: a static image, as the non-root user 65532.
FROM ${RUNTIME_IMAGE}
COPY --from=build /out/aspd /out/aspctl /usr/local/bin/
# Data directory for the embedded SQLite store and the generated admin token
# (unused with ASPD_DATABASE_URL=postgres://... and ASPD_ADMIN_TOKEN).
COPY --from=build --chown=65532:65532 /out/data /var/lib/aspd
ENV ASPD_DATA_DIR=/var/lib/aspd
VOLUME ["/var/lib/aspd"]
WORKDIR /var/lib/aspd
USER 65532:65532
EXPOSE 8080
ENTRYPOINT ["/usr/local/bin/aspd", "--listen", "0.0.0.0:8080"]
