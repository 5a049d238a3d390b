# syntax=docker/dockerfile:1
# Builds every Lifeboat binary under cmd/ and ships them on distroless (nonroot). One image,
# one binary per Deployment container: set `command:` to the binary (see manifests/).
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

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/ /usr/local/bin/
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/lifeboat-controller"]
