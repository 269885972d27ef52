"""The library suite (run.py): Django (django-auditlog, django-simple-history)."""

from __future__ import annotations

import os
import shutil
import subprocess

from harness import (
    ARCHIVER,
    HERE,
    PORT,
    PY,
    WORK,
    Check,
    admin_connection,
    connect,
    deleted_since,
    dsn,
    ids,
    ledger_mark,
    log,
    one,
    preview,
    run_policy,
    setup_database,
)

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
