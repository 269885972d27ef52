# PGXS-style entry points, for PGXN's client (`pgxn install pg_retention` runs `make` and
# `make install` with PG_CONFIG set) and for anyone used to building extensions with make.
# The build itself is cargo-pgrx's, for the PostgreSQL that PG_CONFIG names: it needs Rust,
# cargo-pgrx 0.18.0 (`cargo install cargo-pgrx --version 0.18.0 --locked`, then
# `cargo pgrx init --pg15 "$(which pg_config)"`) and libclang; see docs/install.md.
# Debian packages and the images are built by scripts/package instead.
PG_CONFIG ?= pg_config
PG_CONFIG_PATH := $(shell command -v $(PG_CONFIG))

all:
	cd pg_retention && cargo pgrx package --pg-config "$(PG_CONFIG_PATH)" --out-dir ../target/make-stage

# The library, the control file, the install script and every upgrade script.
install:
	cd pg_retention && cargo pgrx install --release --pg-config "$(PG_CONFIG_PATH)"

installcheck:
	@echo "pg_retention is tested by scripts/test (docs/development.md), not by pg_regress"

.PHONY: all install installcheck
