# syntax=docker/dockerfile:1
# Builds every Lifeboat binary under cmd/ in one stage, then one distroless (nonroot) image per
# binary, as the manifests expect (ghcr.io/lifeboat-k8s/<binary>):
#
#   docker build --target lifeboat-webhook    -t ghcr.io/lifeboat-k8s/lifeboat-webhook:v0.1.0 .
#   docker build --target lifeboat-scheduler  -t ghcr.io/lifeboat-k8s/lifeboat-scheduler:v0.1.0 .
#   docker build --target lifeboat-controller -t ghcr.io/lifeboat-k8s/lifeboat-controller:v0.1.0 .
#   docker build --target lifeboat            -t ghcr.io/lifeboat-k8s/lifeboat:v0.1.0 .
#
# VERSION (a semver tag: component-base's metrics registry rejects anything else) lands in
# k8s.io/component-base/version, shown by the binaries and their metrics.
ARG GO_VERSION=1.27.3

FROM golang:${GO_VERSION} AS build
WORKDIR /src
ENV GOTOOLCHAIN=local CGO_ENABLED=0
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/root/go/pkg/mod go mod download
COPY . .
ARG VERSION=v0.0.0-dev
RUN --mount=type=cache,target=/root/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    mkdir -p /out && \
    go build -trimpath \
      -ldflags "-s -w -X k8s.io/component-base/version.gitVersion=${VERSION} -X k8s.io/component-base/version.gitMajor=0 -X k8s.io/component-base/version.gitMinor=1" \
      -o /out/ ./cmd/...

FROM gcr.io/distroless/static-debian12:nonroot AS base
USER 65532:65532

FROM base AS lifeboat-webhook
COPY --from=build /out/lifeboat-webhook /usr/local/bin/
ENTRYPOINT ["/usr/local/bin/lifeboat-webhook"]

FROM base AS lifeboat-scheduler
COPY --from=build /out/lifeboat-scheduler /usr/local/bin/
ENTRYPOINT ["/usr/local/bin/lifeboat-scheduler"]

FROM base AS lifeboat
COPY --from=build /out/lifeboat /usr/local/bin/
ENTRYPOINT ["/usr/local/bin/lifeboat"]

# The default target (last stage).
FROM base AS lifeboat-controller
COPY --from=build /out/lifeboat-controller /usr/local/bin/
ENTRYPOINT ["/usr/local/bin/lifeboat-controller"]
