# Multi-stage build: a PostgreSQL 15 image with pg_retention preloaded, and an archiver image.
# Uses the same pinned tools as scripts/setup (which it runs).
#   docker build --target postgres -t pg_retention/postgres .
#   docker build --target archiver -t pg_retention/archiver .

FROM rust:1.95-bookworm AS build
WORKDIR /src
COPY . .
# scripts/setup installs PostgreSQL 15, headers, libclang, cargo-pgrx 0.18.0 and runs cargo pgrx init.
RUN bash scripts/setup \
 && cd pg_retention \
 && cargo pgrx package --pg-config /usr/lib/postgresql/15/bin/pg_config --out-dir /out/ext \
 && cd .. \
 && cargo build --release -p pg-retention-archiver \
 && install -D target/release/pg-retention-archiver /out/bin/pg-retention-archiver

FROM debian:bookworm-slim AS postgres
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends postgresql-15 \
 && rm -rf /var/lib/apt/lists/*
COPY --from=build /out/ext/ /
RUN echo "shared_preload_libraries = 'pg_retention'" >> /usr/share/postgresql/15/postgresql.conf.sample
USER postgres
ENV PATH=/usr/lib/postgresql/15/bin:$PATH PGDATA=/var/lib/postgresql/data
CMD ["bash", "-c", "[ -s \"$PGDATA/PG_VERSION\" ] || initdb -D \"$PGDATA\"; exec postgres -D \"$PGDATA\""]

FROM debian:bookworm-slim AS archiver
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends ca-certificates \
 && rm -rf /var/lib/apt/lists/*
COPY --from=build /out/bin/pg-retention-archiver /usr/local/bin/pg-retention-archiver
USER nobody
ENTRYPOINT ["pg-retention-archiver"]
