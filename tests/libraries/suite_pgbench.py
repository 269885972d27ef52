"""The library suite (run.py): pgbench."""

from __future__ import annotations

import os
import subprocess
import time

from harness import (
    PG_BIN,
    PORT,
    Check,
    admin_connection,
    connect,
    deleted_since,
    ledger_mark,
    one,
    preview,
    run_policy,
    setup_database,
)

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
    # An archive policy governs it too (its batches name rows by place; tests/tests/archiver/round_trips.rs
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
