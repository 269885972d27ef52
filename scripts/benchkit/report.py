"""The report: ratios, the fleet figures, plots, the published copy, the printed table."""
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from benchkit.cluster import ROOT, say


def ratio(a, b):
    return round(a / b, 3) if a is not None and b else None


def fleet(quick):
    """scripts/bench-fleet's figures (its own clusters): retention.metrics() with 1,000 policies and
    30 databases swept by a pool of two (--quick: 100 policies, 5 databases)."""
    args = ["--policies", "100", "--databases", "5"] if quick else []
    subprocess.run([sys.executable, str(ROOT / "scripts" / "bench-fleet"), *args], check=True,
                   stdout=subprocess.DEVNULL)
    return json.loads((ROOT / "target" / "bench" / "fleet.json").read_text())


def plot(out_dir):
    """The PNG plots (scripts/plot-bench, matplotlib from the test venv that scripts/setup makes)."""
    python = Path("/var/tmp/pg_retention/venv/bin/python")
    if not python.exists():
        say(f"no plots: {python} is missing (scripts/setup installs it)")
        return
    subprocess.run([str(python), str(ROOT / "scripts" / "plot-bench"), str(out_dir / "report.json"), str(out_dir)],
                   check=True)


# What --publish copies: the raw report and the plots under target/bench, and their names in docs/.
PUBLISHED = {"report.json": "bench-report.json", "writer-latency.png": "bench-writer-latency.png",
             "throughput.png": "bench-throughput.png"}


def publish(out_dir):
    """Copies this run's report and plots into docs/ (--publish): the figures docs/performance.md quotes."""
    missing = [name for name in PUBLISHED if not (out_dir / name).exists()]
    if missing:
        sys.exit(f"[bench] not published: {', '.join(missing)} missing in {out_dir} (the plots need scripts/setup's venv)")
    for name, published in PUBLISHED.items():
        if name == "report.json":
            # Without the writer's raw samples (a quarter of a megabyte): the plot shows them.
            report = json.loads((out_dir / name).read_text())
            report.pop("writer_series", None)
            (ROOT / "docs" / published).write_text(json.dumps(report, indent=1) + "\n")
        else:
            shutil.copyfile(out_dir / name, ROOT / "docs" / published)
        say(f"published {out_dir / name} as docs/{published}")


def machine():
    info = {"nproc": os.cpu_count()}
    try:
        info["mem_total"] = next(l for l in open("/proc/meminfo") if l.startswith("MemTotal")).split(":")[1].strip()
        info["cpu"] = next(l for l in open("/proc/cpuinfo") if l.startswith("model name")).split(":")[1].strip()
    except (OSError, StopIteration):
        pass
    return info


def print_table(r):
    print()
    print(f"{'variant':<16} {'rows':>10} {'wall s':>9} {'rows/s':>11} {'WAL B/row':>10} {'writer p50':>11} {'writer p99':>11}")
    for name, v in r["variants"].items():
        w = v.get("writer", {})
        print(f"{name:<16} {v['rows']:>10} {v['wall_s']:>9} {v['rows_per_s']!s:>11} {v['wal_bytes_per_row']!s:>10} "
              f"{w.get('p50_ms', '-')!s:>11} {w.get('p99_ms', '-')!s:>11}")
    idle = r["writer_idle"]
    print(f"{'(idle)':<16} {'':>10} {'':>9} {'':>11} {'':>10} {idle['p50_ms']!s:>11} {idle['p99_ms']!s:>11}")
    print()
    for name in ("partman", "partition_drop", "row_sweep", "archive_delete", "archive_drop", "partition_drop_small"):
        v = r.get("partitions", {}).get(name)
        if v:
            w = v.get("writer", {})
            print(f"{name:<20} {v['rows']:>10} rows {v['wall_s']:>9} s  leaves {v.get('leaves_dropped', '-')!s:>4}  "
                  f"writer p99 {w.get('p99_ms', '-')!s:>8}")
    print()
    by_rep = r.get("ratios_by_repetition", {})
    for k, val in r["ratios"].items():
        reps = f"  (per repetition {', '.join(map(str, by_rep[k]))})" if by_rep.get(k) else ""
        print(f"  {k:<28} {val}{reps}")
    print(f"  {'archiver_peak_rss_bytes':<28} {r['archiver_peak_rss_bytes']}")
    f = r.get("fleet", {})
    print(f"  {'metrics_ms':<28} {f.get('metrics', {}).get('metrics_ms')} "
          f"({f.get('metrics', {}).get('policies')} policies)")
    print(f"  {'fleet_sweep_s':<28} {f.get('fleet', {}).get('fleet_sweep_s')} "
          f"({f.get('fleet', {}).get('databases')} databases x {f.get('fleet', {}).get('policies_per_database')} policies, "
          f"2 workers)")
    print()
