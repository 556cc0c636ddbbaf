# syntax=docker/dockerfile:1
#
# One image holds every Keyhouse binary; the container's command picks one:
#   docker run keyhouse:dev gateway
#   docker run keyhouse:dev licensing serve      (or: licensing migrate)
# Build:
#   docker build --build-arg VERSION="$(make -s print-version)" -t keyhouse:dev .
# docs/operations.md describes running it (docker-compose.yml, deploy/helm/keyhouse).

ARG GO_VERSION=1.26

FROM --platform=$BUILDPLATFORM golang:${GO_VERSION}-bookworm AS build
ARG TARGETOS=linux
ARG TARGETARCH=amd64
ARG VERSION=dev
# CGO off: the result runs on a distroless image without libc. GOTOOLCHAIN=local: a go.mod
# asking for a newer Go than this image's fails loudly instead of downloading one.
ENV CGO_ENABLED=0 GOFLAGS=-buildvcs=false GOTOOLCHAIN=local
WORKDIR /src
# Copying the whole context (see .dockerignore) instead of go.mod files one by one keeps the
# Dockerfile right when go.work gains a module; the cache mounts keep rebuilds fast anyway.
COPY . .
RUN --mount=type=cache,target=/go/pkg/mod \
    --mount=type=cache,target=/root/.cache/go-build \
    go mod download && \
    GOOS=$TARGETOS GOARCH=$TARGETARCH go build -trimpath \
      -ldflags "-s -w -X github.com/keyhouse/keyhouse/pkg/buildinfo.version=${VERSION}" \
      -o /out/ \
      ./gateway/cmd/gateway \
      ./services/billing/cmd/billing \
      ./services/licensing/cmd/licensing \
      ./services/activations/cmd/activations \
      ./services/releases/cmd/releases \
      ./services/storefront/cmd/storefront \
      ./services/events/cmd/events

# distroless/static: CA certificates (Stripe, SMTP over TLS) and tzdata, no shell, no
# package manager; the nonroot variant runs as uid/gid 65532.
FROM gcr.io/distroless/static-debian12:nonroot
ARG VERSION=dev
LABEL org.opencontainers.image.title="keyhouse" \
      org.opencontainers.image.description="Keyhouse license server: gateway and services" \
      org.opencontainers.image.version="${VERSION}"
COPY --from=build /out/ /usr/local/bin/
ENV PATH=/usr/local/bin:/usr/bin:/bin
USER 65532:65532
# Gateway HTTP and its metrics; services serve gRPC on 9101-9106 when GRPC_ADDR says so
# (0.0.0.0:<port>), and each process its metrics on its port + 1000 (what make release's
# image declares too).
EXPOSE 8080 9080 9101 9102 9103 9104 9105 9106 10101 10102 10103 10104 10105 10106
CMD ["gateway"]
