# syntax=docker/dockerfile:1

# ---- build -------------------------------------------------------------------------------
FROM rust:1-bookworm AS builder
WORKDIR /src
COPY . .
# The cache mounts keep the registry and target/ between builds; the binary is copied out
# of target/ in the same step because a cache mount is not part of the image.
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked \
 && cp target/release/kbq /usr/local/bin/kbq

# ---- run ---------------------------------------------------------------------------------
FROM debian:bookworm-slim
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates curl \
 && rm -rf /var/lib/apt/lists/*
RUN groupadd --system kbq \
 && useradd --system --gid kbq --home-dir /var/lib/kbq --no-create-home --shell /usr/sbin/nologin kbq \
 && mkdir -p /var/lib/kbq/data \
 && chown -R kbq:kbq /var/lib/kbq
COPY --from=builder /usr/local/bin/kbq /usr/local/bin/kbq

# data_dir ("data") and the default store (surrealkv://data/kb) are relative to the working
# directory, so both live in /var/lib/kbq/data; mount a volume there to keep them.
WORKDIR /var/lib/kbq
USER kbq
ENV KBQ_SERVER__LISTEN=0.0.0.0:8080
EXPOSE 8080
# Healthy once the store is connected and indexed (/readyz); /livez answers from the moment
# the listener binds, for an orchestrator's liveness probe.
HEALTHCHECK --interval=30s --timeout=3s --start-period=60s --retries=3 \
    CMD curl -fsS http://127.0.0.1:8080/readyz || exit 1
ENTRYPOINT ["kbq"]
CMD ["serve"]
