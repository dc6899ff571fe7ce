# TaskForge's container image: one static binary (every command: serve, migrate,
# worker, the client commands) plus a health probe, on an empty base, as a non-root
# user. Build from the repository root: docker build -t taskforge .
#
# No `# syntax=` line: the Dockerfile frontend built into the engine's BuildKit reads
# it, so a build needs no registry but for the build image. BUILD_IMAGE names another
# Go image with the golang image's contract (go on PATH, GOPATH=/go, CA certificates);
# compose/test/stack.sh passes one it makes locally.
ARG BUILD_IMAGE=golang:1.26

FROM ${BUILD_IMAGE} AS build
WORKDIR /src
# Modules first, so that a source change does not download them again. The Go
# SDK (client/) is a module of its own that go.mod replaces with this copy.
COPY go.mod go.sum ./
COPY client/go.mod client/go.sum ./client/
RUN --mount=type=cache,target=/go/pkg/mod go mod download
COPY . .
ENV CGO_ENABLED=0
RUN --mount=type=cache,target=/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    go build -trimpath -ldflags="-s -w" -o /out/taskforge ./cmd/taskforge && \
    go build -trimpath -ldflags="-s -w" -o /out/taskforge-healthcheck ./compose/healthcheck
# The runtime image has no useradd: write its user and group files here.
RUN echo 'taskforge:x:65532:65532:taskforge:/nonexistent:/sbin/nologin' > /out/passwd && \
    echo 'taskforge:x:65532:' > /out/group

FROM scratch
# CA certificates for TLS to PostgreSQL and Redis (sslmode=verify-full, rediss://).
COPY --from=build /etc/ssl/certs/ca-certificates.crt /etc/ssl/certs/ca-certificates.crt
COPY --from=build /out/passwd /etc/passwd
COPY --from=build /out/group /etc/group
COPY --from=build /out/taskforge /out/taskforge-healthcheck /usr/local/bin/
ENV PATH=/usr/local/bin \
    TASKFORGE_LISTEN=:8080
USER 65532:65532
EXPOSE 8080
# /healthz answers once serve has connected to PostgreSQL and Redis and applied the
# migrations. Worker containers run no server: disable the check for them.
HEALTHCHECK --interval=10s --timeout=3s --start-period=30s --retries=3 \
    CMD ["/usr/local/bin/taskforge-healthcheck"]
# serve drains for up to 10 s on SIGTERM (Docker's default stop signal); give the
# container a stop timeout above that (docker stop -t 30, compose stop_grace_period).
ENTRYPOINT ["taskforge"]
CMD ["serve"]
