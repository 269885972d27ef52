"""The partitioned comparison: pg_partman's retention against pg_retention on daily leaves."""

from benchkit.cluster import say
from benchkit.measure import latency, median_rep, timed
from benchkit.tables import build_partitioned, build_table, expired
from benchkit.variants import clear_store, leaves, v_archivers, v_partman, v_run, v_run_unpaced


def partitions(c, ctx, prows, repeat, writer, only=None):
    """The partitioned comparison: pg_partman's retention, our drop of whole leaves, our row sweep
    of the same rows unpartitioned; each with the writer, round-robin over the repetitions."""
    c.sql("CREATE SCHEMA IF NOT EXISTS partman; CREATE EXTENSION IF NOT EXISTS pg_partman SCHEMA partman")
    leaf_rows = prows // 60
    variants = [("partman", build_partitioned, v_partman, True),
                ("partition_drop", build_partitioned, v_run, True),
                ("row_sweep", build_table, v_run_unpaced, True),
                ("archive_delete", build_partitioned, v_archivers(batch_rows=max(leaf_rows // 4, 100)), False),
                ("archive_drop", build_partitioned, v_archivers(batch_rows=leaf_rows * 2), False)]
    variants = [v for v in variants if not only or v[0] in only]
    reps = {name: [] for name, _, _, _ in variants}
    lat = {name: [] for name, _, _, _ in variants}
    for rep in range(repeat):
        for name, make, fn, with_writer in variants:
            make(c, prows)
            before = leaves(c) if make is build_partitioned else None
            say(f"{name}: running on {prows} rows ({rep + 1}/{repeat})")
            if with_writer:
                writer.start()
            result, window = timed(c, name, lambda: fn(c, ctx))
            if with_writer:
                lat[name].extend(writer.stop(window))
            clear_store(ctx)
            if before is not None:
                result["leaves_dropped"] = before - leaves(c)
            result["expired_left"] = expired(c)
            reps[name].append(result)
            say(f"{name}: {result['rows']} rows in {result['wall_s']} s, {result.get('leaves_dropped', '-')} leaves "
                f"dropped, {result['expired_left']} expired rows left")
    out = {"rows": prows}
    for name, _, _, with_writer in variants:
        out[name] = median_rep(reps[name])
        if with_writer:
            out[name]["writer"] = latency(lat[name])
    # Rows per leaf against seconds per dropped leaf: the same drop at a tenth of the rows.
    small = max(prows // 10, 1000)
    runs = []
    for rep in range(repeat if not only or "partition_drop" in only else 0):
        build_partitioned(c, small)
        before = leaves(c)
        say(f"partition_drop: running on {small} rows ({rep + 1}/{repeat})")
        r, _ = timed(c, "partition_drop", lambda: v_run(c, ctx))
        r["leaves_dropped"] = before - leaves(c)
        runs.append(r)
    if runs:
        out["partition_drop_small"] = median_rep(runs)
    for key in ("partition_drop", "partition_drop_small"):
        r = out.get(key)
        if not r:
            continue
        r["rows_per_leaf"] = round(r["rows"] / r["leaves_dropped"]) if r.get("leaves_dropped") else None
        r["ms_per_dropped_leaf"] = round(r["wall_s"] * 1000 / r["leaves_dropped"], 2) if r.get("leaves_dropped") else None
    return out
