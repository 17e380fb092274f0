# retryd: the retry-decision gRPC service.
#
#   docker build -t retryd .
#   docker run --rm -p 50051:50051 -p 9464:9464 retryd
#   buildah bud --format docker -t retryd .    # podman build --format docker
#
# buildah and podman write OCI images by default, and the OCI image format
# has no HEALTHCHECK: pass `--format docker` to keep it (Kubernetes ignores
# it either way and uses the chart's gRPC probes).
#
# The runtime stage is FROM scratch: the binary, the shared libraries `ldd`
# names, CA certificates, and passwd/group entries for the unprivileged
# user, copied from a Debian 12 stage (the same glibc as the builder). No
# shell, no package manager; the health check is `retryd health`.
#
# The binary is built with the `dist` profile (full LTO, one codegen unit,
# see Cargo.toml): slower to build, cheaper per call.
#
# Dependencies are compiled in their own layer (cargo-chef), so a change to
# retryd's own code rebuilds only retryd. No system protoc is needed: build.rs
# compiles proto/ in pure Rust (protox).
#
# BINARY=prebuilt takes the file `retryd` at the root of the build context
# instead of compiling (scripts/image-check.sh builds with a context holding
# only the binary CI's cargo test built).

ARG RUST_VERSION=1.95
ARG DEBIAN_IMAGE=debian:bookworm-slim
ARG BINARY=builder

FROM rust:${RUST_VERSION}-bookworm AS chef
RUN cargo install cargo-chef --version 0.1.78 --locked
WORKDIR /src

# The recipe: Cargo.toml/Cargo.lock and the crate's target layout only.
FROM chef AS planner
COPY . .
RUN cargo chef prepare --recipe-path recipe.json

FROM chef AS builder
ARG RETRYD_REVISION=unknown
COPY --from=planner /src/recipe.json recipe.json
# The build flags (tokio_unstable), so the dependency layer is built as the binary is.
COPY .cargo .cargo
# The dependency layer: rebuilt only when the recipe changes.
RUN cargo chef cook --profile dist --locked --recipe-path recipe.json
COPY . .
RUN RETRYD_REVISION=${RETRYD_REVISION} cargo build --profile dist --locked --bin retryd \
 && install -D -m 0755 target/dist/retryd /out/retryd

# A binary built outside (BINARY=prebuilt): CI's debug build (the image
# check tests the image's assembly, not the optimiser).
FROM ${DEBIAN_IMAGE} AS prebuilt
COPY retryd /out/retryd

FROM ${BINARY} AS binary

# The runtime's files, gathered in /rootfs on Debian.
FROM ${DEBIAN_IMAGE} AS rootfs
COPY --from=binary /out/retryd /rootfs/usr/local/bin/retryd
RUN set -eu; \
    if [ ! -s /etc/ssl/certs/ca-certificates.crt ]; then \
      apt-get update -q && apt-get install -y -q --no-install-recommends ca-certificates \
      && rm -rf /var/lib/apt/lists/*; \
    fi; \
    chmod 0755 /rootfs/usr/local/bin/retryd; \
    for lib in $(ldd /rootfs/usr/local/bin/retryd | awk '$2 == "=>" && $3 ~ /^\// { print $3 } $1 ~ /^\// { print $1 }'); do \
      cp -L --parents "$lib" /rootfs/; \
    done; \
    mkdir -p /rootfs/etc/ssl/certs /rootfs/tmp; \
    chmod 1777 /rootfs/tmp; \
    cp /etc/ssl/certs/ca-certificates.crt /rootfs/etc/ssl/certs/; \
    printf 'root:x:0:0:root:/root:/sbin/nologin\nretryd:x:10001:10001:retryd:/nonexistent:/sbin/nologin\n' > /rootfs/etc/passwd; \
    printf 'root:x:0:\nretryd:x:10001:\n' > /rootfs/etc/group; \
    printf 'hosts: files dns\n' > /rootfs/etc/nsswitch.conf

FROM scratch AS runtime
ARG VERSION=0.1.0
ARG RETRYD_REVISION=unknown
LABEL org.opencontainers.image.title="retryd" \
      org.opencontainers.image.description="Retry-decision gRPC service: may this failed call be retried, when, and would a retry create a duplicate?" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${RETRYD_REVISION}" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.base.name="scratch"
COPY --from=rootfs /rootfs/ /
USER 10001:10001
# 50051: gRPC (RetryDecisionService, grpc.health.v1, reflection); 9464: /metrics
EXPOSE 50051 9464
HEALTHCHECK --interval=10s --timeout=3s --start-period=5s --retries=3 \
  CMD ["/usr/local/bin/retryd", "health", "--addr", "http://127.0.0.1:50051"]
# SIGTERM (docker stop, the kubelet): NOT_SERVING for --shutdown-delay while
# still answering, then a drain of up to --shutdown-grace; exit 0 (1 if
# calls were abandoned).
STOPSIGNAL SIGTERM
ENTRYPOINT ["/usr/local/bin/retryd"]
CMD ["serve", "--listen", "0.0.0.0:50051", "--metrics-listen", "0.0.0.0:9464", "--log-format", "json"]
