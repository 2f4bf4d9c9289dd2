# syntax=docker/dockerfile:1

# Build: static binaries (pure Go: the SQLite driver needs no cgo).
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ENV CGO_ENABLED=0
RUN go build -trimpath -ldflags="-s -w" -o /out/aspd ./cmd/aspd \
 && go build -trimpath -ldflags="-s -w" -o /out/aspctl ./cmd/aspctl \
 && mkdir -p /out/data

# Run: distroless static, as the non-root user 65532.
FROM gcr.io/distroless/static-debian12:nonroot
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
