# Multi-stage build: a PostgreSQL 15 image with pg_retention preloaded, and an archiver image.
# The build stage runs scripts/setup (its "build" mode: the same pinned Debian packages,
# cargo-pgrx 0.18.0 and `cargo pgrx init` that scripts/test installs, without the test tools).
#   docker build --target postgres -t pg_retention/postgres .
#   docker build --target archiver -t pg_retention/archiver .

FROM rust:1.95-bookworm AS build
WORKDIR /src
COPY . .
RUN bash scripts/setup build \
 && cd pg_retention \
 && cargo pgrx package --pg-config /usr/lib/postgresql/15/bin/pg_config --out-dir /out/ext \
 && cp sql/pg_retention--*--*.sql /out/ext/usr/share/postgresql/15/extension/ \
 && cd .. \
 && cargo build --release -p pg-retention-archiver \
 && install -D target/release/pg-retention-archiver /out/bin/pg-retention-archiver

FROM debian:bookworm-slim AS postgres
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends postgresql-15 \
 && rm -rf /var/lib/apt/lists/*
# The library, the install script and the upgrade scripts (ALTER EXTENSION ... UPDATE).
COPY --from=build /out/ext/ /
# deploy/postgres-start: on first start initdb with pg_retention preloaded, listening on every
# interface, password authentication for all but local peers (POSTGRES_PASSWORD sets it).
COPY deploy/postgres-start /usr/local/bin/postgres-start
RUN install -d -o postgres -g postgres /var/lib/postgresql/data
USER postgres
ENV PATH=/usr/lib/postgresql/15/bin:$PATH PGDATA=/var/lib/postgresql/data
EXPOSE 5432
HEALTHCHECK --interval=10s --timeout=5s --start-period=30s CMD pg_isready -h 127.0.0.1 -q
CMD ["postgres-start"]

FROM debian:bookworm-slim AS archiver
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends ca-certificates \
 && rm -rf /var/lib/apt/lists/* \
 && useradd --system --home-dir /var/lib/pg-retention --create-home --shell /usr/sbin/nologin archiver
COPY --from=build /out/bin/pg-retention-archiver /usr/local/bin/pg-retention-archiver
USER archiver
# The default store (file://./archive) is a writable directory here; mount a volume on it, or set
# PG_RETENTION_STORE to an object store. Metrics and /healthz listen on every interface.
WORKDIR /var/lib/pg-retention
RUN mkdir -p archive
ENV PG_RETENTION_METRICS_ADDR=0.0.0.0:9187
EXPOSE 9187
# No HTTP client in the image: bash's /dev/tcp asks /healthz (200 while both connections live).
HEALTHCHECK --interval=15s --timeout=5s --start-period=30s CMD ["bash", "-c", "exec 3<>/dev/tcp/127.0.0.1/9187 && printf 'GET /healthz HTTP/1.0\\r\\n\\r\\n' >&3 && head -n 1 <&3 | grep -q ' 200'"]
ENTRYPOINT ["pg-retention-archiver"]
CMD ["run"]
