# unisched container image.
#
#   docker build -t unisched:0.1.0 --build-arg VERSION=0.1.0 .
#
# Stage 1 builds the release binary; stage 2 is distroless "cc" (glibc and libgcc only, the
# libraries the binary links: TLS is rustls + ring, so no OpenSSL) running as the non-root user
# 65532 that deploy/manifests/deployment.yaml and the Helm chart expect. The binary is stripped
# (the release profile keeps line tables for backtraces; the image does not need them).

ARG RUST_VERSION=1.95

FROM rust:${RUST_VERSION}-bookworm AS build
WORKDIR /src
COPY . .
# Only the scheduler: the benchmark binary (unisched-bench, cmd/unisched-bench) is not shipped.
RUN cargo build --release --locked -p unisched --bin unisched \
    && strip --strip-all target/release/unisched \
    && target/release/unisched version

FROM gcr.io/distroless/cc-debian12:nonroot
ARG VERSION=0.1.0
LABEL org.opencontainers.image.title="unisched" \
      org.opencontainers.image.description="A Kubernetes scheduler with one ledger for node resources and devices" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.licenses="Apache-2.0"
COPY --from=build /src/target/release/unisched /usr/local/bin/unisched
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/unisched"]
