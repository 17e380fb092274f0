# retryd: the retry-decision gRPC service.
#
#   docker build -t retryd .
#   docker run --rm -p 50051:50051 -p 9464:9464 retryd
#
# Dependencies are compiled in their own layer (cargo-chef), so a change to
# retryd's own code rebuilds only retryd. No system protoc is needed: build.rs
# compiles proto/ in pure Rust (protox).

ARG RUST_VERSION=1.95

FROM rust:${RUST_VERSION}-bookworm AS chef
RUN cargo install cargo-chef --version 0.1.78 --locked
WORKDIR /src

# The recipe: Cargo.toml/Cargo.lock and the crate's target layout only.
FROM chef AS planner
COPY . .
RUN cargo chef prepare --recipe-path recipe.json

FROM chef AS builder
COPY --from=planner /src/recipe.json recipe.json
# The dependency layer: rebuilt only when the recipe changes.
RUN cargo chef cook --release --locked --recipe-path recipe.json
COPY . .
RUN cargo build --release --locked --bin retryd \
 && install -D -m 0755 target/release/retryd /out/retryd

# The runtime: Debian 12 like the builder (same glibc), no toolchain, and an
# unprivileged user.
FROM debian:bookworm-slim AS runtime
RUN groupadd --system --gid 10001 retryd \
 && useradd --system --uid 10001 --gid retryd --no-create-home --home-dir /nonexistent \
      --shell /usr/sbin/nologin retryd
COPY --from=builder /out/retryd /usr/local/bin/retryd
USER 10001:10001
# 50051: gRPC (RetryDecisionService, grpc.health.v1, reflection); 9464: /metrics
EXPOSE 50051 9464
HEALTHCHECK --interval=10s --timeout=3s --start-period=5s --retries=3 \
  CMD ["retryd", "health", "--addr", "http://127.0.0.1:50051"]
# SIGTERM (docker stop) drains in-flight calls and exits 0.
STOPSIGNAL SIGTERM
CMD ["retryd", "serve", "--listen", "0.0.0.0:50051", "--metrics-listen", "0.0.0.0:9464"]
