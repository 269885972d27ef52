"""The library suite (scripts/libraries): pg_retention governing the tables that widely used
libraries create, with their own tools, rows made through their own APIs and their workers
running beside the sweep. The recipes are those of docs/recipes.md.

Roles, as in production: `app_owner` (LOGIN, not a superuser) owns each library's database and
so its schema `public`; the libraries connect as it and create their tables as it. `ret_admin`
(LOGIN, a member of `retention_admin` only) registers the policies and calls retention.*, with
SELECT and DELETE on the governed tables granted by their owner. `archiver` (LOGIN, a member of
`retention_archiver` only) runs pg-retention-archiver. The superuser (`postgres`) only sets up:
databases, roles, and moving rows back in time (the clock of a test that cannot wait 30 days).

Environment: LIBS_PGPORT, LIBS_WORK (scratch directory), LIBS_ARCHIVER (the archiver binary),
LIBS_VENV_PY (this venv's python), LIBS_PG_BIN (PostgreSQL's bin directory), LIBS_REPO.
Prints one PASS/FAIL line per library and "N passed, M failed"; exits 1 on any failure.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import subprocess
import sys
import time
import traceback

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
        log(f"XPASS {what}: remove the expected failure from tests/libraries/run.py")
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


# --------------------------------------------------------------------------------------------
# pgqueuer: pgqueuer_log (one row per job state change) and pgqueuer_statistics (per-second
# aggregates of the log), with a pgqueuer worker consuming jobs beside the sweep.
# --------------------------------------------------------------------------------------------


def enqueue(entrypoint: str, payloads: list, execute_after: int | None = None) -> None:
    """Enqueues through pgqueuer's own API (Queries.enqueue), as app_owner."""
    from datetime import timedelta

    from pgqueuer import PsycopgDriver, Queries

    async def go() -> None:
        conn = await psycopg.AsyncConnection.connect(dsn("pgqueuer", "app_owner"), autocommit=True)
        after = timedelta(seconds=execute_after) if execute_after else None
        await Queries(PsycopgDriver(conn)).enqueue(
            [entrypoint] * len(payloads), payloads, [0] * len(payloads), [after] * len(payloads))
        await conn.close()

    asyncio.run(go())


def test_pgqueuer(c: Check) -> None:
    db = "pgqueuer"
    setup_database(db)
    env = dict(os.environ, PGHOST="127.0.0.1", PGPORT=PORT, PGUSER="app_owner", PGDATABASE=db)
    subprocess.run([os.path.join(VENV_BIN, "pgq"), "install"], env=env, check=True, stdout=subprocess.DEVNULL)
    app = connect(db, "app_owner")
    app.execute("GRANT SELECT, DELETE ON pgqueuer_log, pgqueuer_statistics TO ret_admin")
    su = connect(db, "postgres")
    admin = admin_connection(db)

    worker = subprocess.Popen(
        [PY, os.path.join(HERE, "pgq_worker.py"), dsn(db, "app_owner")],
        stdout=subprocess.PIPE, stderr=open(os.path.join(WORK, "pgq-worker.log"), "w"), text=True,
    )
    try:
        assert worker.stdout.readline().strip() == "worker ready"
        # Phase 1: jobs that finish (some raising), held failures, stuck-picked jobs, and jobs
        # nobody serves (queued forever) or that wait for an hour (queued, not yet due).
        enqueue("work", [b"ok"] * 180 + [b"fail"] * 20)
        enqueue("flaky", [b"x"] * 10)
        enqueue("slow", [b"x"] * 5)
        enqueue("nobody", [b"x"] * 10)
        enqueue("work", [b"later"] * 5, execute_after=3600)
        wait_for(
            "phase-1 jobs to finish and their log to be aggregated",
            lambda: one(su, """SELECT (SELECT count(*) FROM pgqueuer WHERE entrypoint = 'work' AND execute_after < now()) = 0
                                  AND (SELECT count(*) FROM pgqueuer WHERE status = 'failed') = 10
                                  AND (SELECT count(*) FROM pgqueuer WHERE status = 'picked') = 5
                                  AND (SELECT count(*) FROM pgqueuer_log WHERE NOT aggregated) = 0"""),
        )
        live_before = one(su, "SELECT count(*) FROM pgqueuer")
        # Time passes: everything so far is 10 days old, statistics 40.
        su.execute("UPDATE pgqueuer_log SET created = created - interval '10 days'")
        su.execute("UPDATE pgqueuer_statistics SET created = created - interval '40 days'")

        # The recipe (docs/recipes.md), registered by the retention admin.
        admin.execute("""SELECT retention.add_policy(name => 'pgqueuer_log', relation => 'pgqueuer_log',
            kind => 'age', age_column => 'created', older_than => '7 days',
            terminal => $$status IN ('successful', 'exception', 'canceled', 'deleted') AND aggregated$$)""")
        admin.execute("""SELECT retention.add_policy(name => 'pgqueuer_statistics', relation => 'pgqueuer_statistics',
            kind => 'age', age_column => 'created', older_than => '30 days')""")
        c.eq("add_policy NOTICEs (the queue's DELETE trigger is not on a governed table)", admin.notices, [])

        # Phase 2 beside the sweep: the worker consumes new jobs while the run deletes.
        enqueue("work", [b"ok"] * 150 + [b"fail"] * 10)
        rule = f"""SELECT id FROM pgqueuer_log WHERE created < now() - interval '7 days'
                    AND status IN {FINAL} AND aggregated"""
        expected = ids(su, rule)
        live_log = ids(su, "SELECT l.id FROM pgqueuer_log l JOIN pgqueuer q ON q.id = l.job_id")
        all_before = ids(su, "SELECT id FROM pgqueuer_log")
        c.true("live jobs have log rows in the window's past (so the test means something)",
               len(ids(su, "SELECT l.id FROM pgqueuer_log l JOIN pgqueuer q ON q.id = l.job_id WHERE l.created < now() - interval '7 days'")) >= 25)
        p = preview(admin, "pgqueuer_log")
        c.eq("pgqueuer_log: preview eligible = the rule's rows (SQL)", p["eligible"], len(expected))
        mark = ledger_mark(su)
        enqueue("work", [b"ok"] * 50)  # more writes while the run is under way
        run_policy(admin, "pgqueuer_log")
        c.eq("pgqueuer_log: run deleted = preview would_delete", deleted_since(su, "pgqueuer_log", mark), p["would_delete"])
        gone = all_before - ids(su, "SELECT id FROM pgqueuer_log")
        c.eq("pgqueuer_log: rows deleted = exactly the rule's rows", sorted(gone) == sorted(expected), True)
        c.eq("pgqueuer_log: deleted count", len(gone), len(expected))
        c.eq("pgqueuer_log: log rows of live jobs (queued, picked, held failed) deleted",
             len(live_log - ids(su, "SELECT id FROM pgqueuer_log")), 0)
        c.eq("pgqueuer: live jobs untouched (queued, picked, failed)",
             one(su, "SELECT count(*) FROM pgqueuer WHERE entrypoint <> 'work' OR payload = 'later'"), live_before)
        stranded = one(su, f"""SELECT count(*) FROM pgqueuer_log l WHERE l.status IN ('queued', 'picked')
                                 AND l.created < now() - interval '7 days'
                                 AND NOT EXISTS (SELECT 1 FROM pgqueuer q WHERE q.id = l.job_id)""")
        log(f"note queued/picked log rows of finished jobs past the window, not expressible, kept: {stranded}")

        # pgqueuer_statistics through the background worker, while the pgqueuer worker still runs.
        enqueue("work", [b"ok"] * 50)
        stats_expected = ids(su, "SELECT id FROM pgqueuer_statistics WHERE created < now() - interval '30 days'")
        stats_before = ids(su, "SELECT id FROM pgqueuer_statistics")
        p = preview(admin, "pgqueuer_statistics")
        c.eq("pgqueuer_statistics: preview would_delete = the rule's rows", p["would_delete"], len(stats_expected))
        mark = ledger_mark(su)
        c.eq("retention.wake()", one(admin, "SELECT retention.wake()"), True)
        wait_for("the background worker's run of pgqueuer_statistics",
                 lambda: one(su, """SELECT count(*) FROM retention.ledger WHERE method = 'run' AND actor = 'worker'
                                     AND policy = 'pgqueuer_statistics' AND id > %s""", (mark,)))
        c.eq("pgqueuer_statistics: worker deleted = preview", deleted_since(su, "pgqueuer_statistics", mark), p["would_delete"])
        c.eq("pgqueuer_statistics: rows deleted = exactly the rule's rows",
             stats_before - ids(su, "SELECT id FROM pgqueuer_statistics") == stats_expected, True)
        # The worker's next run of the log (new rows are young): deletes nothing live.
        health = admin.execute("SELECT policy, healthy, reasons FROM retention.health()").fetchall()
        c.true("health() healthy for both policies", all(h[1] for h in health), str(health))
        c.true("the pgqueuer worker is still running", worker.poll() is None)
        wait_for("phase-2 jobs to be consumed",
                 lambda: one(su, "SELECT count(*) FROM pgqueuer WHERE entrypoint = 'work' AND execute_after < now()") == 0)
    finally:
        worker.send_signal(signal.SIGTERM)
        try:
            worker.wait(timeout=15)
        except subprocess.TimeoutExpired:
            worker.kill()
            worker.wait()
    # Finished log rows not yet folded into statistics (an aggregation that lags; the worker,
    # which aggregates every second, is stopped now): old, but they stay.
    su.execute("""INSERT INTO pgqueuer_log (created, job_id, status, priority, entrypoint, aggregated)
                  SELECT now() - interval '9 days', -g, 'successful', 0, 'work', false
                    FROM generate_series(1, 7) g""")
    p = preview(admin, "pgqueuer_log")
    c.eq("pgqueuer_log: old unaggregated rows not eligible", p["eligible"], 0)
    run_policy(admin, "pgqueuer_log")
    c.eq("pgqueuer_log: old unaggregated rows kept", one(su, "SELECT count(*) FROM pgqueuer_log WHERE job_id < 0"), 7)
    for conn in (app, su, admin):
        conn.close()


# --------------------------------------------------------------------------------------------
# Django: django-auditlog's auditlog_logentry (archive_then_delete, archiver round trip) and
# django-simple-history's shop_historicalinvoice (one versions policy).
# --------------------------------------------------------------------------------------------


def django_project(db: str) -> tuple[str, dict]:
    proj = os.path.join(WORK, "django")
    shutil.rmtree(proj, ignore_errors=True)
    shutil.copytree(os.path.join(HERE, "django_project"), proj)
    env = dict(os.environ, LIBS_DB=db, LIBS_PGPORT=PORT, DJANGO_SETTINGS_MODULE="settings")
    subprocess.run([PY, "manage.py", "makemigrations", "shop"], cwd=proj, env=env, check=True, stdout=subprocess.DEVNULL)
    subprocess.run([PY, "manage.py", "migrate"], cwd=proj, env=env, check=True, stdout=subprocess.DEVNULL)
    return proj, env


def produce(proj: str, env: dict, invoices: int, updates: int, tagged: int) -> None:
    subprocess.run([PY, "produce.py", str(invoices), str(updates), str(tagged)], cwd=proj, env=env,
                   check=True, stdout=subprocess.DEVNULL)


def archiver(db: str, *args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ,
               PG_RETENTION_DATABASE_URL=dsn(db, "archiver"),
               PG_RETENTION_STORE="file://" + os.path.join(WORK, "archive"),
               PG_RETENTION_OWNER="scripts-libraries")
    return subprocess.run([ARCHIVER, *args], env=env, capture_output=True, text=True)


def test_django_auditlog(c: Check) -> None:
    db = "django_app"
    setup_database(db)
    proj, env = django_project(db)
    produce(proj, env, 60, 3, 10)  # 60 creates, 180 updates, 10 tag saves, 2 deletes
    app = connect(db, "app_owner")
    app.execute("GRANT SELECT, DELETE ON auditlog_logentry, shop_historicalinvoice TO ret_admin")
    su = connect(db, "postgres")
    admin = admin_connection(db)
    # A year and a half passes for the first 150 entries.
    su.execute("""UPDATE auditlog_logentry SET "timestamp" = "timestamp" - interval '400 days'
                   WHERE id IN (SELECT id FROM auditlog_logentry ORDER BY id LIMIT 150)""")
    # An auditor's legal hold on one customer's invoices.
    hold = one(admin, """SELECT retention.place_hold('auditlog_logentry', $$object_repr = 'Invoice object (3)'$$,
                           'audit 2026-12', 'scripts/libraries')""")
    admin.execute("""SELECT retention.add_policy(name => 'auditlog', relation => 'auditlog_logentry',
        kind => 'age', age_column => 'timestamp', older_than => '365 days',
        terminal => $$action IN (0, 1, 2, 3)$$, action => 'archive_then_delete')""")
    rule = """FROM auditlog_logentry WHERE "timestamp" < now() - interval '365 days' AND action IN (0, 1, 2, 3)"""
    held = one(su, f"SELECT count(*) {rule} AND object_repr = 'Invoice object (3)'")
    su.execute("DROP TABLE IF EXISTS audit_expected")
    su.execute(f"CREATE TABLE audit_expected AS SELECT * {rule} AND object_repr <> 'Invoice object (3)'")
    expected = one(su, "SELECT count(*) FROM audit_expected")
    c.true("held entries exist among the eligible", held > 0, str(held))
    p = preview(admin, "auditlog")
    c.eq("auditlog: preview eligible = the rule's rows", p["eligible"], expected + held)
    c.eq("auditlog: preview held = the held rows", p["held"], held)
    c.eq("auditlog: preview backlog (archive policies: deletable rows) = eligible - held", p["backlog"], expected)
    # The application keeps writing while the archiver works.
    writer = subprocess.Popen([PY, "produce.py", "20", "2", "0"], cwd=proj, env=env, stdout=subprocess.DEVNULL)
    shutil.rmtree(os.path.join(WORK, "archive"), ignore_errors=True)
    out = archiver(db, "once", "--batch-rows", "40")
    writer.wait()
    c.eq("archiver once exit code", out.returncode, 0)
    if out.returncode:
        log(out.stderr[-2000:])
    archived = one(su, "SELECT coalesce(sum(deleted), 0)::bigint FROM retention.archives WHERE policy = 'auditlog'")
    c.eq("auditlog: rows archived and deleted = the rule's unheld rows", archived, expected)
    c.eq("auditlog: eligible rows left = the held ones", one(su, f"SELECT count(*) {rule}"), held)
    c.eq("auditlog: every deleted row was one the rule selects",
         one(su, "SELECT count(*) FROM audit_expected e WHERE EXISTS (SELECT 1 FROM auditlog_logentry l WHERE l.id = e.id)"), 0)
    verify = archiver(db, "verify", "--all")
    c.eq("archiver verify --all exit code", verify.returncode, 0)
    # Restore every slice and compare with what was archived.
    su.execute("DROP SCHEMA IF EXISTS restored CASCADE")
    su.execute("CREATE SCHEMA restored AUTHORIZATION archiver")
    keys = [line.split("\t")[0] for line in archiver(db, "ls").stdout.splitlines() if line.strip()]
    c.true("slices in the store", len(keys) >= 2, str(keys))
    restored_tables = []
    for n, key in enumerate(keys):
        r = archiver(db, "restore", key, "--into", f"restored.slice_{n}")
        if r.returncode:
            log(r.stdout + r.stderr)
        c.eq(f"restore slice {n} exit code", r.returncode, 0)
        restored_tables.append(f"restored.slice_{n}")
    union = " UNION ALL ".join(f"SELECT * FROM {t}" for t in restored_tables)
    c.eq("auditlog: restored rows = archived rows (both directions, EXCEPT ALL)",
         one(su, f"""SELECT (SELECT count(*) FROM ({union} EXCEPT ALL SELECT * FROM audit_expected) a)
                          + (SELECT count(*) FROM (SELECT * FROM audit_expected EXCEPT ALL ({union})) b)"""), 0)
    c.eq("auditlog: restored row count", one(su, f"SELECT count(*) FROM ({union}) u"), expected)
    c.refused("auditlog: updating an entry past the window refused (guard trigger)", app,
              """UPDATE auditlog_logentry SET changes_text = 'rewritten' WHERE object_repr = 'Invoice object (3)'
                  AND "timestamp" < now() - interval '365 days'""", "RT501")
    admin.execute("SELECT retention.lift_hold(%s, 'scripts/libraries', 'audit closed')", (hold,))
    for conn in (app, su, admin):
        conn.close()


def test_django_simple_history(c: Check) -> None:
    db = "django_app"  # made by test_django_auditlog (the same Django project)
    proj = os.path.join(WORK, "django")
    env = dict(os.environ, LIBS_DB=db, LIBS_PGPORT=PORT, DJANGO_SETTINGS_MODULE="settings")
    su = connect(db, "postgres")
    app = connect(db, "app_owner")
    admin = admin_connection(db)
    # Versions older than a year go, but each invoice keeps its newest 3 whatever their age.
    su.execute("UPDATE shop_historicalinvoice SET history_date = history_date - interval '400 days' WHERE id % 3 <> 0")
    # The m2m history rows reference their version by history_id, with no foreign key (simple_history
    # declares db_constraint=False). Step 1: the key as Django 5.2 declares every key (its
    # on_delete=CASCADE runs in Python): NO ACTION, deferrable. Referenced versions are kept.
    app.execute("""ALTER TABLE shop_historicalinvoice_tags ADD CONSTRAINT historicalinvoice_tags_history
                   FOREIGN KEY (history_id) REFERENCES shop_historicalinvoice (history_id)
                   DEFERRABLE INITIALLY DEFERRED""")
    app.execute("GRANT SELECT ON shop_historicalinvoice_tags TO ret_admin")
    admin.notices.clear()
    admin.execute("""SELECT retention.add_policy(name => 'invoice_history', relation => 'shop_historicalinvoice',
        kind => 'versions', group_by => ARRAY['id'], order_by => 'history_date',
        keep => 2147483647, min_keep => 3, age_column => 'history_date', older_than => '365 days')""")
    c.eq("invoice_history: add_policy NOTICEs (no DELETE trigger needs a search_path)", admin.notices, [])
    c.refused("invoice_history: an age policy beside the ranked one refused", admin,
              """SELECT retention.add_policy(name => 'invoice_history_age', relation => 'shop_historicalinvoice',
                 kind => 'age', age_column => 'history_date', older_than => '30 days')""", "22023")
    rule = """SELECT history_id FROM (
                SELECT history_id, history_date,
                       row_number() OVER (PARTITION BY id ORDER BY history_date DESC, history_id DESC) AS rank
                  FROM shop_historicalinvoice) v
               WHERE rank > 3 AND history_date < now() - interval '365 days'"""
    expected = ids(su, rule)
    referenced = ids(su, f"SELECT history_id FROM ({rule}) e WHERE EXISTS (SELECT 1 FROM shop_historicalinvoice_tags t WHERE t.history_id = e.history_id)")
    c.true("the rule selects rows, some of them referenced", len(expected) > len(referenced) > 0,
           f"{len(expected)} {len(referenced)}")
    p = preview(admin, "invoice_history")
    c.eq("invoice_history (NO ACTION key): preview referenced = eligible versions with m2m rows", p["referenced"], len(referenced))
    c.eq("invoice_history (NO ACTION key): preview would_delete = the rule's unreferenced rows", p["would_delete"], len(expected - referenced))
    # The run: every Django foreign key is DEFERRABLE INITIALLY DEFERRED; a sweep checks keys at
    # the end of each of its statements (engine/references.rs), so referenced versions are kept
    # and the rest go.
    before = ids(su, "SELECT history_id FROM shop_historicalinvoice")
    mark = ledger_mark(su)
    run_policy(admin, "invoice_history")
    c.eq("invoice_history (Django's deferrable key): run deleted = preview would_delete",
         deleted_since(su, "invoice_history", mark), p["would_delete"])
    c.eq("invoice_history (Django's deferrable key): rows deleted = the rule's unreferenced rows",
         before - ids(su, "SELECT history_id FROM shop_historicalinvoice") == expected - referenced, True)
    # The same reference as a key that is not deferrable (NO ACTION): the run skips referenced
    # versions and counts them.
    app.execute("ALTER TABLE shop_historicalinvoice_tags DROP CONSTRAINT historicalinvoice_tags_history")
    app.execute("""ALTER TABLE shop_historicalinvoice_tags ADD CONSTRAINT historicalinvoice_tags_history
                   FOREIGN KEY (history_id) REFERENCES shop_historicalinvoice (history_id)""")
    expected = ids(su, rule)
    referenced = ids(su, f"SELECT history_id FROM ({rule}) e WHERE EXISTS (SELECT 1 FROM shop_historicalinvoice_tags t WHERE t.history_id = e.history_id)")
    p = preview(admin, "invoice_history")
    c.eq("invoice_history (NO ACTION key): preview referenced", p["referenced"], len(referenced))
    c.eq("invoice_history (NO ACTION key): preview would_delete", p["would_delete"], len(expected - referenced))
    before = ids(su, "SELECT history_id FROM shop_historicalinvoice")
    mark = ledger_mark(su)
    run_policy(admin, "invoice_history")
    c.eq("invoice_history (NO ACTION key): run deleted = preview would_delete", deleted_since(su, "invoice_history", mark), p["would_delete"])
    c.eq("invoice_history (NO ACTION key): rows deleted = the rule's unreferenced rows",
         before - ids(su, "SELECT history_id FROM shop_historicalinvoice") == expected - referenced, True)
    skip = su.execute("SELECT rows, detail FROM retention.ledger WHERE policy = 'invoice_history' AND method = 'reference_skip' AND id > %s", (mark,)).fetchall()
    log(f"reference_skip entries: {skip}")
    c.eq("invoice_history (NO ACTION key): one reference_skip ledgered", len(skip), 1)
    # Two runs so far (the deferrable key's and this one), each left the referenced versions.
    c.eq("invoice_history (NO ACTION key): stats.reference_skips (both runs)",
         one(admin, "SELECT reference_skips FROM retention.stats WHERE policy = 'invoice_history'"),
         sum(r[0] for r in su.execute("SELECT rows FROM retention.ledger WHERE policy = 'invoice_history' AND method = 'reference_skip'").fetchall()))
    c.eq("invoice_history (NO ACTION key): this run's reference_skip = the referenced versions", skip[0][0] if skip else None, len(referenced))
    c.eq("invoice_history: what is left of the rule = the referenced versions", ids(su, rule), referenced)
    # Step 2: the key the recipe declares: ON DELETE CASCADE, so a version's m2m rows go with it.
    app.execute("ALTER TABLE shop_historicalinvoice_tags DROP CONSTRAINT historicalinvoice_tags_history")
    app.execute("""ALTER TABLE shop_historicalinvoice_tags ADD CONSTRAINT historicalinvoice_tags_history
                   FOREIGN KEY (history_id) REFERENCES shop_historicalinvoice (history_id) ON DELETE CASCADE""")
    expected = ids(su, rule)
    m2m_expected = ids(su, f"SELECT m2m_history_id FROM shop_historicalinvoice_tags WHERE history_id IN ({rule})")
    m2m_before = ids(su, "SELECT m2m_history_id FROM shop_historicalinvoice_tags")
    before = ids(su, "SELECT history_id FROM shop_historicalinvoice")
    versions_before = dict(su.execute("SELECT id, count(*) FROM shop_historicalinvoice GROUP BY id").fetchall())
    p = preview(admin, "invoice_history")
    c.eq("invoice_history (CASCADE key): preview referenced", p["referenced"], 0)
    c.eq("invoice_history (CASCADE key): preview would_delete = the rule's rows", p["would_delete"], len(expected))
    mark = ledger_mark(su)
    # The application keeps saving (new versions are young and rank first).
    writer = subprocess.Popen([PY, "produce.py", "10", "3", "2"], cwd=proj, env=env, stdout=subprocess.DEVNULL)
    run_policy(admin, "invoice_history")
    c.eq("django writer beside the sweep", writer.wait(), 0)
    c.eq("invoice_history: run deleted = preview would_delete", deleted_since(su, "invoice_history", mark), p["would_delete"])
    gone = before - ids(su, "SELECT history_id FROM shop_historicalinvoice")
    c.eq("invoice_history: rows deleted = exactly the rule's rows", gone == expected, True)
    versions_after = dict(su.execute("SELECT id, count(*) FROM shop_historicalinvoice GROUP BY id").fetchall())
    c.eq("invoice_history: invoices keeping fewer than min(3, their versions before)",
         sum(1 for k, n in versions_before.items() if versions_after.get(k, 0) < min(3, n)), 0)
    m2m_gone = m2m_before - ids(su, "SELECT m2m_history_id FROM shop_historicalinvoice_tags")
    c.eq("invoice_history: m2m rows cascaded = exactly those of the deleted versions", m2m_gone == m2m_expected, True)
    dependents = one(su, """SELECT coalesce(sum((d->>'deleted')::bigint), 0)::bigint FROM retention.ledger,
                             jsonb_array_elements(coalesce(detail->'dependents', '[]')) d
                            WHERE policy = 'invoice_history' AND method = 'prune' AND id > %s""", (mark,))
    c.eq("invoice_history: ledger detail.dependents = m2m rows cascaded", dependents, len(m2m_expected))
    c.eq("invoice_history: m2m rows left pointing at no version",
         one(su, """SELECT count(*) FROM shop_historicalinvoice_tags t
                     WHERE NOT EXISTS (SELECT 1 FROM shop_historicalinvoice h WHERE h.history_id = t.history_id)"""), 0)
    p = preview(admin, "invoice_history")
    c.eq("invoice_history: nothing left to delete", p["would_delete"], 0)
    for conn in (app, su, admin):
        conn.close()


# --------------------------------------------------------------------------------------------
# pgbench: pgbench_history (no primary key), with pgbench writing beside the sweep.
# --------------------------------------------------------------------------------------------


def test_pgbench(c: Check) -> None:
    db = "pgbench"
    setup_database(db)
    pgbench = os.path.join(PG_BIN, "pgbench")
    base = [pgbench, "-h", "127.0.0.1", "-p", PORT, "-U", "app_owner", db]
    subprocess.run(base[:-1] + ["-i", "-q", "-s", "1", db], check=True, capture_output=True)
    subprocess.run(base[:-1] + ["-n", "-c", "2", "-t", "300", db], check=True, capture_output=True)
    app = connect(db, "app_owner")
    app.execute("GRANT SELECT, DELETE ON pgbench_history TO ret_admin")
    su = connect(db, "postgres")
    admin = admin_connection(db)
    c.eq("pgbench_history has no primary key", one(su, "SELECT count(*) FROM pg_index WHERE indrelid = 'pgbench_history'::regclass"), 0)
    su.execute("UPDATE pgbench_history SET mtime = mtime - interval '40 days' WHERE aid % 3 <> 0")
    # An archive policy governs it too (its batches name rows by place; tests/tests/archiver.rs
    # archives and restores such a table): registered, it sees the rule's rows; dropped again
    # for the delete policy below (a table takes policies of one class).
    admin.execute("""SELECT retention.add_policy(name => 'pgbench_archive', relation => 'pgbench_history', kind => 'age',
                 age_column => 'mtime', older_than => '30 days', terminal => 'true', action => 'archive_then_delete')""")
    c.eq("pgbench_history: an archive policy (no primary key) sees the rule's rows",
         preview(admin, "pgbench_archive")["eligible"],
         one(su, "SELECT count(*) FROM pgbench_history WHERE mtime < now() - interval '30 days'"))
    admin.execute("SELECT retention.drop_policy('pgbench_archive')")
    admin.execute("""SELECT retention.add_policy(name => 'pgbench_history', relation => 'pgbench_history',
        kind => 'age', age_column => 'mtime', older_than => '30 days', batch_size => 100)""")
    su.execute("DROP TABLE IF EXISTS hist_before, hist_expected")
    su.execute("CREATE TABLE hist_before AS SELECT * FROM pgbench_history")
    su.execute("CREATE TABLE hist_expected AS SELECT * FROM pgbench_history WHERE mtime < now() - interval '30 days'")
    expected = one(su, "SELECT count(*) FROM hist_expected")
    p = preview(admin, "pgbench_history")
    c.eq("pgbench_history: preview would_delete = the rule's rows", p["would_delete"], expected)
    mark = ledger_mark(su)
    bench = subprocess.Popen(base[:-1] + ["-n", "-c", "2", "-T", "4", db], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(0.5)
    run_policy(admin, "pgbench_history")
    c.eq("pgbench beside the sweep", bench.wait(), 0)
    c.eq("pgbench_history: run deleted = preview would_delete", deleted_since(su, "pgbench_history", mark), expected)
    # Without a key: the rows that left are exactly the expected multiset.
    c.eq("pgbench_history: rows gone = exactly the rule's rows (multiset)",
         one(su, """SELECT (SELECT count(*) FROM (SELECT * FROM hist_expected
                                EXCEPT ALL (SELECT * FROM hist_before EXCEPT ALL SELECT * FROM pgbench_history)) a)
                         + (SELECT count(*) FROM ((SELECT * FROM hist_before EXCEPT ALL SELECT * FROM pgbench_history)
                                EXCEPT ALL SELECT * FROM hist_expected) b)"""), 0)
    c.eq("pgbench_history: nothing young deleted",
         one(su, "SELECT count(*) FROM pgbench_history WHERE mtime < now() - interval '30 days'"), 0)
    c.true("pgbench's own rows from during the sweep are there",
           one(su, "SELECT count(*) FROM pgbench_history") > one(su, "SELECT count(*) FROM hist_before") - expected)
    for conn in (app, su, admin):
        conn.close()


def main() -> int:
    os.makedirs(WORK, exist_ok=True)
    setup_roles()
    results = []
    xfails: list[str] = []
    for name, fn in (
        ("pgqueuer", test_pgqueuer),
        ("django-auditlog", test_django_auditlog),
        ("django-simple-history", test_django_simple_history),
        ("pgbench", test_pgbench),
    ):
        print(f"[libraries] {name}", flush=True)
        c = Check()
        started = time.time()
        try:
            fn(c)
        except Exception:  # noqa: BLE001 - any error fails the library, with its trace
            traceback.print_exc()
            c.failures.append("error")
        if STRICT and c.xfails:
            c.failures += c.xfails
        status = "PASS" if not c.failures else "FAIL"
        detail = "" if not c.failures else " (" + "; ".join(c.failures) + ")"
        print(f"{status} {name} ({time.time() - started:.1f}s){detail}", flush=True)
        for x in c.xfails:
            print(f"XFAIL {name}: known product bug: {x}", flush=True)
            xfails.append(f"{name}: {x}")
        results.append(not c.failures)
    passed = sum(results)
    failed = len(results) - passed
    if xfails:
        print(f"{len(xfails)} expected failure(s) of the product (LIBS_STRICT=1 counts them as failures)", flush=True)
    print(f"{passed} passed, {failed} failed", flush=True)
    return 0 if failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
