# syntax=docker/dockerfile:1
#
# ClueCDC: one binary (`cluecdc serve` for the web UI + API + reconciler, `cluecdc worker` for the
# reconciler alone). Templates, static assets and migrations are embedded at compile time, so the
# runtime image needs only the binary and the shared libraries it links (OpenSSL for librdkafka).
#
#   docker build -t cluecdc .
#   docker run --init -p 127.0.0.1:8080:8080 -v cluecdc-data:/data cluecdc
#
# The build context is the repository root; .dockerignore keeps target/, .git and the test stack
# out of it. BuildKit is required for the cache mounts (the default builder of current Docker).

ARG RUST_VERSION=1.95
ARG DEBIAN_RELEASE=bookworm

FROM rust:${RUST_VERSION}-${DEBIAN_RELEASE} AS builder

# rdkafka builds a bundled librdkafka (configure + make) and links OpenSSL and zlib dynamically.
RUN apt-get update \
 && apt-get install -y --no-install-recommends \
      build-essential pkg-config libssl-dev zlib1g-dev python3 perl \
 && rm -rf /var/lib/apt/lists/*

WORKDIR /build
COPY . .

# sqlx compile-time checked queries, if any, use the committed .sqlx/ data instead of a live DB.
ENV SQLX_OFFLINE=true \
    CARGO_TERM_COLOR=never

# target/ is a cache mount, so the binary is copied out of it inside the same step.
RUN --mount=type=cache,id=cluecdc-cargo-registry,target=/usr/local/cargo/registry,sharing=locked \
    --mount=type=cache,id=cluecdc-cargo-git,target=/usr/local/cargo/git,sharing=locked \
    --mount=type=cache,id=cluecdc-target,target=/build/target,sharing=locked \
    cargo build --release --locked --bin cluecdc \
 && install -D -m 0755 target/release/cluecdc /out/cluecdc


# The Connect config provider jar this image hands out at /static/cluecdc-config-provider.jar
# (CLUECDC_PROVIDER_JAR below), built as connect-image/Dockerfile and scripts/stack build it.
FROM maven:3.9-eclipse-temurin-17 AS config-provider
WORKDIR /src/connect-image
COPY connect-image/versions.lock ./
COPY connect-image/config-provider/pom.xml config-provider/pom.xml
COPY connect-image/config-provider/src config-provider/src
RUN --mount=type=cache,target=/root/.m2 \
    set -eu; . ./versions.lock; \
    mvn -q -B -f config-provider/pom.xml -Dkafka.version="$KAFKA_VERSION" -DskipTests package; \
    install -D -m 0644 config-provider/target/cluecdc-config-provider-*.jar \
      /out/cluecdc-config-provider.jar


FROM debian:${DEBIAN_RELEASE}-slim AS runtime

# libssl3: librdkafka's TLS; curl: the HEALTHCHECK below; ca-certificates: TLS to S3, Kafka, Connect.
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates curl libssl3 zlib1g \
 && rm -rf /var/lib/apt/lists/*

# Fixed ids so that a named volume keeps the same owner across image rebuilds.
RUN groupadd --system --gid 10001 cluecdc \
 && useradd --system --uid 10001 --gid cluecdc --home-dir /data --no-create-home \
      --shell /usr/sbin/nologin cluecdc \
 && install -d -o cluecdc -g cluecdc -m 0700 /data

COPY --from=builder /out/cluecdc /usr/local/bin/cluecdc
COPY --from=config-provider /out/cluecdc-config-provider.jar /usr/local/share/cluecdc/cluecdc-config-provider.jar

# Without CLUECDC_MASTER_KEY or CLUECDC_MASTER_KEY_FILE the first start generates
# /data/master.key (mode 0600) in the volume, next to the database. Production deployments supply
# the key from a secret store instead (CLUECDC_MASTER_KEY_FILE=/run/secrets/..., which must exist).
ENV CLUECDC_LISTEN=0.0.0.0:8080 \
    CLUECDC_DATA_DIR=/data \
    CLUECDC_PROVIDER_JAR=/usr/local/share/cluecdc/cluecdc-config-provider.jar

USER cluecdc:cluecdc
WORKDIR /data
VOLUME ["/data"]
EXPOSE 8080

# `cluecdc worker` has no HTTP listener; compose.yaml overrides this check for that service.
HEALTHCHECK --interval=10s --timeout=3s --start-period=20s --retries=3 \
  CMD curl -fsS -o /dev/null http://127.0.0.1:8080/healthz || exit 1

ENTRYPOINT ["/usr/local/bin/cluecdc"]
CMD ["serve"]
