# Shared helpers for scripts/*. Sourced, not run.
REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PG_MAJOR=15
PG_BIN=/usr/lib/postgresql/${PG_MAJOR}/bin
PG_CONFIG=${PG_BIN}/pg_config
SCRATCH=/var/tmp/pg_retention
# The last release, built by scripts/past-release for the upgrade test (tests/tests/upgrade.rs).
PAST_RELEASE=0.1.0
PAST_RELEASE_COMMIT=2b63bd85819071954abaf5149d504857f791e660
export PATH="$HOME/.cargo/bin:$PATH"
# pgrx's test framework reads $USER; CI does not set it.
export USER="${USER:-$(id -un)}"
# The SeaweedFS launcher is installed by pip into Python's scripts directory.
PY_SCRIPTS="$(python3 -c 'import sysconfig; print(sysconfig.get_path("scripts"))' 2>/dev/null || true)"
[ -n "$PY_SCRIPTS" ] && export PATH="$PATH:$PY_SCRIPTS"

say() { printf '[%s] %s\n' "$(basename "$0")" "$*"; }

as_postgres() {
  if [ "$(id -u)" -eq 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}

# Builds and installs the extension into Debian's PostgreSQL 15.
install_extension() {
  local profile_flag=("$@")
  (cd "$REPO_ROOT/pg_retention" && cargo pgrx install --pg-config "$PG_CONFIG" "${profile_flag[@]}" >/dev/null)
}
