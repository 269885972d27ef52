# Multi-stage build from the Debian packages, so the images and the packages cannot drift:
#   build     scripts/setup's "build" mode (the pinned Debian packages, cargo-pgrx 0.18.0,
#             `cargo pgrx init`), then scripts/package for PostgreSQL 15: the same .deb files
#             that scripts/package-test installs in a clean bookworm root
#   postgres  the official postgres:15-bookworm image with postgresql-15-pg-retention installed
#             and pg_retention in shared_preload_libraries of every cluster its entry point makes
#   archiver  debian:bookworm-slim with pg-retention-archiver installed, run as its systemd unit
#             runs it (same user, directory and configuration file)
#
#   docker build --target postgres -t pg_retention/postgres .
#   docker build --target archiver -t pg_retention/archiver .
#
# The build context is the sources (.dockerignore leaves out .git and target/), so
# scripts/package builds the tree as it is, versioned <version>~dev.tree unless CHANGELOG.md
# dates the version (the build stage's scripts/package command is tried without Docker on a
# copy of the context).

FROM rust:1.95-bookworm AS build
WORKDIR /src
COPY . .
RUN bash scripts/setup build \
 && PACKAGE_MAJORS=15 PACKAGE_CHECKS=0 bash scripts/package \
 && mkdir -p /out \
 && cp target/package/postgresql-15-pg-retention_*.deb target/package/pg-retention-archiver_*.deb /out/

# The official image: PostgreSQL 15 as the Debian package postgresql-15 (which the extension's
# package depends on), its docker-entrypoint.sh (initdb on first start, POSTGRES_PASSWORD,
# /docker-entrypoint-initdb.d), PGDATA=/var/lib/postgresql/data.
FROM postgres:15-bookworm AS postgres
COPY --from=build /out/postgresql-15-pg-retention_*.deb /tmp/
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends /tmp/postgresql-15-pg-retention_*.deb \
 && rm -rf /var/lib/apt/lists/* /tmp/*.deb \
 && sed -ri "s/^#?(shared_preload_libraries)\s*=\s*'[^']*'/\1 = 'pg_retention'/" /usr/share/postgresql/postgresql.conf.sample \
 && grep -q "^shared_preload_libraries = 'pg_retention'" /usr/share/postgresql/postgresql.conf.sample
# The worker stays off until configured, as in any cluster: for example
#   docker run ... pg_retention/postgres -c pg_retention.enabled=on -c pg_retention.databases=app
HEALTHCHECK --interval=10s --timeout=5s --start-period=30s CMD pg_isready -h 127.0.0.1 -q

FROM debian:bookworm-slim AS archiver
COPY --from=build /out/pg-retention-archiver_*.deb /tmp/
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends ca-certificates /tmp/pg-retention-archiver_*.deb \
 && rm -rf /var/lib/apt/lists/* /tmp/*.deb \
 && install -d -m 0750 -o pg-retention -g pg-retention /var/lib/pg-retention/archive
# As the unit (/lib/systemd/system/pg-retention-archiver.service): user pg-retention (made by the
# package), working directory /var/lib/pg-retention, /etc/pg-retention/archiver.toml (its store:
# file:///var/lib/pg-retention/archive, a volume here). Flags and environment variables win over
# the file: set PG_RETENTION_DATABASE_URL, and PG_RETENTION_STORE for an object store.
USER pg-retention
WORKDIR /var/lib/pg-retention
VOLUME /var/lib/pg-retention/archive
ENV PG_RETENTION_CONFIG=/etc/pg-retention/archiver.toml PG_RETENTION_METRICS_ADDR=0.0.0.0:9187
EXPOSE 9187
# No HTTP client in the image: bash's /dev/tcp asks /healthz (200 while both connections live).
HEALTHCHECK --interval=15s --timeout=5s --start-period=30s CMD ["bash", "-c", "exec 3<>/dev/tcp/127.0.0.1/9187 && printf 'GET /healthz HTTP/1.0\\r\\n\\r\\n' >&3 && head -n 1 <&3 | grep -q ' 200'"]
ENTRYPOINT ["pg-retention-archiver"]
CMD ["run"]
