"""What every library of the suite (run.py) shares: the environment, connections as each role,
the assertions of one library (Check), set-up, and the calls into pg_retention."""

from __future__ import annotations

import os
import time

import psycopg

PORT = os.environ["LIBS_PGPORT"]
WORK = os.environ["LIBS_WORK"]
ARCHIVER = os.environ["LIBS_ARCHIVER"]
PY = os.environ["LIBS_VENV_PY"]
PG_BIN = os.environ["LIBS_PG_BIN"]
REPO = os.environ["LIBS_REPO"]
HERE = os.path.dirname(os.path.abspath(__file__))
VENV_BIN = os.path.dirname(PY)

STRICT = os.environ.get("LIBS_STRICT") == "1"
FINAL = "('successful', 'exception', 'canceled', 'deleted')"


def dsn(db: str, role: str) -> str:
    return f"host=127.0.0.1 port={PORT} user={role} dbname={db}"


def connect(db: str, role: str) -> psycopg.Connection:
    return psycopg.connect(dsn(db, role), autocommit=True)


def one(conn: psycopg.Connection, sql: str, params=None):
    row = conn.execute(sql, params).fetchone()
    return row[0] if row is not None and len(row) == 1 else row


def log(msg: str) -> None:
    print(f"    {msg}", flush=True)


class Check:
    """Collects the assertions of one library; a failed one fails the library."""

    def __init__(self) -> None:
        self.failures: list[str] = []
        self.xfails: list[str] = []

    def eq(self, what: str, got, want) -> None:
        if got == want:
            log(f"ok   {what}: {got}")
        else:
            log(f"FAIL {what}: got {got!r}, want {want!r}")
            self.failures.append(what)

    def xfail(self, what: str) -> None:
        log(f"XFAIL {what}")
        self.xfails.append(what)

    def xpass(self, what: str) -> None:
        log(f"XPASS {what}: remove the expected failure from its suite in tests/libraries/")
        self.failures.append("xpass: " + what)

    def refused(self, what: str, conn, sql: str, sqlstate: str) -> None:
        try:
            conn.execute(sql)
            got = "accepted"
        except psycopg.Error as e:
            got = e.sqlstate
            log(f"     ({e.sqlstate}: {str(e).splitlines()[0][:110]})")
        self.eq(what, got, sqlstate)

    def true(self, what: str, cond: bool, detail: str = "") -> None:
        if cond:
            log(f"ok   {what}")
        else:
            log(f"FAIL {what} {detail}")
            self.failures.append(what)


def setup_database(db: str) -> None:
    """A database owned by app_owner (so app_owner owns schema public), with pg_retention."""
    su = connect("postgres", "postgres")
    su.execute(f"DROP DATABASE IF EXISTS {db} WITH (FORCE)")
    su.execute(f"CREATE DATABASE {db} OWNER app_owner")
    su.close()
    su = connect(db, "postgres")
    for attempt in range(30):
        try:
            su.execute("CREATE EXTENSION pg_retention")
            break
        except psycopg.Error as e:  # a concurrent CI run may be reinstalling the files
            if attempt == 29:
                raise
            log(f"CREATE EXTENSION failed ({e.sqlstate}: {str(e).strip()[:80]}); retrying")
            time.sleep(2)
    # The retention roles are made by CREATE EXTENSION (cluster-wide): grant them now.
    su.execute("GRANT retention_admin TO ret_admin")
    su.execute("GRANT retention_archiver TO archiver")
    su.close()


def setup_roles() -> None:
    su = connect("postgres", "postgres")
    for role, member_of in (("app_owner", None), ("ret_admin", "retention_admin"), ("archiver", "retention_archiver")):
        exists = one(su, "SELECT count(*) FROM pg_roles WHERE rolname = %s", (role,))
        if not exists:
            su.execute(f"CREATE ROLE {role} LOGIN")
    su.close()


def admin_connection(db: str) -> psycopg.Connection:
    """ret_admin, collecting the NOTICEs the server sends (conn.notices)."""
    conn = connect(db, "ret_admin")
    conn.notices = []
    conn.add_notice_handler(lambda d: conn.notices.append(d.message_primary))
    conn.execute("SET client_min_messages = notice")
    return conn


def ledger_mark(conn) -> int:
    return one(conn, "SELECT coalesce(max(id), 0) FROM retention.ledger")


def deleted_since(conn, policy: str, mark: int) -> int:
    return one(
        conn,
        "SELECT coalesce(sum(rows_deleted), 0)::bigint FROM retention.ledger WHERE policy = %s AND id > %s",
        (policy, mark),
    )


def preview(conn, policy: str) -> dict:
    cur = conn.execute("SELECT * FROM retention.preview(%s)", (policy,))
    names = [d.name for d in cur.description]
    return dict(zip(names, cur.fetchone()))


def run_policy(conn, policy: str) -> None:
    conn.execute("CALL retention.run(%s)", (policy,))


def ids(conn, sql: str) -> set:
    return {r[0] for r in conn.execute(sql).fetchall()}


def wait_for(what: str, fn, timeout: float = 60.0, every: float = 0.3):
    deadline = time.time() + timeout
    while True:
        value = fn()
        if value:
            return value
        if time.time() > deadline:
            raise TimeoutError(f"timed out waiting for {what}")
        time.sleep(every)
