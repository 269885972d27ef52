"""The variants: what users do today, and pg_retention doing the same."""
import os
import shutil
import subprocess
import time

from benchkit.cluster import BATCH, PG_BIN, ROOT, say


def v_bulk(c, _ctx):
    c.sql("DELETE FROM t WHERE created_at < now() - interval '30 days'")


def v_diy_loop(c, _ctx):
    c.sql(f"""
        CREATE OR REPLACE PROCEDURE diy_prune() LANGUAGE plpgsql AS $$
        DECLARE cutoff timestamptz := now() - interval '30 days'; k int;
        BEGIN
          LOOP
            DELETE FROM t WHERE id IN (SELECT id FROM t WHERE created_at < cutoff ORDER BY created_at LIMIT {BATCH});
            GET DIAGNOSTICS k = ROW_COUNT;
            COMMIT;
            EXIT WHEN k = 0;
          END LOOP;
        END $$""")
    c.sql("CALL diy_prune()")


def v_diy_archive(c, ctx):
    out = ctx["workdir"] / "diy_archive.csv"
    subprocess.run(["chown", "postgres", str(ctx["workdir"])], check=False)
    c.sql(f"COPY (SELECT * FROM t WHERE created_at < now() - interval '30 days') TO '{out}' WITH (FORMAT csv)")
    c.sql("DELETE FROM t WHERE created_at < now() - interval '30 days'")


def add_age_policy(c, action="delete"):
    extra = ", terminal => $$status = 'sent'$$, action => 'archive_then_delete'" if action != "delete" else ""
    c.sql("SELECT retention.drop_policy(name) FROM retention.policies")
    c.sql(f"""SELECT retention.add_policy(name => 'bench', relation => 't', kind => 'age', age_column => 'created_at',
              older_than => '30 days', batch_size => {BATCH}, max_rows_per_run => 2000000000 {extra})""")


def pruned(c):
    return int(c.sql("SELECT coalesce(sum(rows), 0) FROM retention.ledger WHERE method = 'prune'"))


def partman_retention(c):
    c.sql("""UPDATE partman.part_config SET retention = '30 days', retention_keep_table = false
              WHERE parent_table = 'public.t'""")


def gone(c):
    """Minus the template's rows still in t (the writer's rows have greater ids): the rows a
    variant removed, however it removed them."""
    return -int(c.sql("SELECT count(*) FROM t WHERE id <= (SELECT max(id) FROM template_t)"))


def v_partman(c, _ctx):
    c.sql("SELECT partman.run_maintenance('public.t')")


def add_archive_policy(c):
    add_age_policy(c, action="archive_then_delete")


def leaves(c):
    return int(c.sql("SELECT count(*) FROM pg_partition_tree('t') WHERE isleaf"))


def v_run(c, _ctx):
    c.sql("CALL retention.run('bench')")


def v_run_unpaced(c, _ctx):
    c.sql("CALL retention.run('bench')", options="-c pg_retention.adaptive_pacing=off")


def v_worker(c, _ctx):
    last = int(c.sql("SELECT coalesce(max(id), 0) FROM retention.ledger"))
    if c.sql("SELECT retention.wake()") != "t":
        raise RuntimeError("no worker to wake")
    # Waits inside one session (each loop statement sees new commits): polling with a new psql
    # process every few milliseconds would load the two cores the worker and the writer share.
    # Each poll reads only the ledger records written since the wake-up (counting the whole
    # ledger every 10 ms took a few ms each time, a tenth of a core).
    c.sql(f"""
        SET statement_timeout = '1h';
        DO $$ BEGIN
            WHILE NOT EXISTS (SELECT 1 FROM retention.ledger WHERE id > {last} AND method = 'run'
                                 AND actor = 'worker' AND policy = 'bench') LOOP
                PERFORM pg_sleep(0.01);
            END LOOP;
        END $$""")


def archiver(ctx, c, store, batch_rows=None, count=1):
    """`count` archivers (`once`, owners bench-1..) at once on one store, with batches of
    `batch_rows` (None: the archiver's default); the peak RSS of the largest, in bytes."""
    procs = []
    for i in range(count):
        env = {**os.environ, "PG_RETENTION_DATABASE_URL": c.url(), "PG_RETENTION_STORE": f"file://{store}",
               "PG_RETENTION_OWNER": f"bench-{i + 1}", "RUST_LOG": "warn",
               "PG_RETENTION_METRICS_ADDR": "127.0.0.1:0"}
        batch = [] if batch_rows is None else ["--batch-rows", str(batch_rows)]
        procs.append(subprocess.Popen([str(ctx["archiver"]), "once", *batch], env=env,
                                      stdout=subprocess.DEVNULL, stderr=subprocess.PIPE))
    rss = 0
    for proc in procs:
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        if proc.returncode != 0:
            raise RuntimeError(f"archiver failed: {proc.stderr.read().decode()[-2000:]}")
        rss = max(rss, usage.ru_maxrss * 1024)  # bytes (ru_maxrss is VmHWM in KiB)
    return rss


def archived(c):
    return int(c.sql("SELECT coalesce(sum(deleted), 0) FROM retention.archives"))


def v_archivers(count=1, batch_rows=None):
    """The variant: `count` archivers with batches of `batch_rows` (None: the archiver's default)
    on a fresh store."""
    def run(c, ctx):
        # The store is removed after the clock stops (clear_store), as the DIY archive's file stays.
        ctx["store"] = ctx["workdir"] / f"store-{time.time_ns()}"
        ctx["archiver_rss"] = archiver(ctx, c, ctx["store"], batch_rows, count)
    return run


v_archive = v_archivers()


def clear_store(ctx):
    if "store" in ctx:
        shutil.rmtree(ctx.pop("store"), ignore_errors=True)


# Per variant: the one-time setup done before the clock starts (registering a policy is not
# part of a sweep), and how its deleted rows are counted afterwards (None: the expired rows
# counted before the clock starts, which is what a baseline deletes).
SETUP = {"run": (add_age_policy, pruned), "run_throttled": (add_age_policy, pruned), "worker": (add_age_policy, pruned),
         **{name: (lambda c: add_age_policy(c, action="archive_then_delete"), archived)
            for name in ("archive", "archive_2", "archive_3", "archive_wide")},
         "partman": (partman_retention, gone), "partition_drop": (add_age_policy, gone),
         "row_sweep": (add_age_policy, gone), "archive_delete": (add_archive_policy, gone),
         "archive_drop": (add_archive_policy, gone)}


def build(quick):
    if quick:
        say("using the debug builds installed by scripts/test")
        subprocess.run(["cargo", "build", "-q", "-p", "pg-retention-archiver"], cwd=ROOT, check=True)
        return ROOT / "target" / "debug" / "pg-retention-archiver"
    say("building and installing release builds (extension and archiver)")
    subprocess.run(["cargo", "pgrx", "install", "--release", "--pg-config", str(PG_BIN / "pg_config")],
                   cwd=ROOT / "pg_retention", check=True, stdout=subprocess.DEVNULL)
    subprocess.run(["cargo", "build", "-q", "--release", "-p", "pg-retention-archiver"], cwd=ROOT, check=True)
    return ROOT / "target" / "release" / "pg-retention-archiver"
