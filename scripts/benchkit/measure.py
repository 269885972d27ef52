"""What a variant is measured with: the concurrent writer, latencies, the clock."""
import signal
import subprocess
import time

from benchkit.tables import expired
from benchkit.variants import SETUP


class Writer:
    """pgbench inserting into t at a fixed rate, logging every transaction's latency."""

    def __init__(self, c, rate, workdir):
        self.c, self.rate, self.dir = c, rate, workdir
        self.proc = None
        self.t0 = None
        # (seconds since start, latency ms) of every insert of the last run, for the plots.
        self.series = []

    def start(self, seconds=3600):
        script = self.dir / "insert.sql"
        script.write_text("INSERT INTO t (created_at, status, payload) VALUES (now(), 'pending', "
                          "'{\"event\": 0, \"body\": \"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\"}');\n")
        for f in self.dir.glob("writer*"):
            f.unlink()
        self.proc = subprocess.Popen(
            ["pgbench", "-n", "-h", "127.0.0.1", "-p", str(self.c.port), "-U", "postgres", "-c", "1", "-R",
             str(self.rate), "-T", str(seconds), "-f", str(script), "-l", "--log-prefix", str(self.dir / "writer"),
             "postgres"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.t0 = time.time()
        time.sleep(0.5)

    def logged(self):
        """(completed at, epoch s; latency ms) of every insert in pgbench's log so far."""
        out = []
        for f in self.dir.glob("writer*"):
            for line in f.read_text().splitlines():
                # client, transaction, latency us, script, epoch s, us (pgbench --log): the
                # epoch is when the insert completed.
                parts = line.split()
                if len(parts) < 6 or not all(p.isdigit() for p in parts[2:6]):
                    continue
                out.append((int(parts[4]) + int(parts[5]) / 1e6, int(parts[2]) / 1000.0))
        return out

    def stop(self, window=None):
        """Stops the writer; returns the latency in ms of every insert, or with `window` (epoch
        seconds a variant ran) of the inserts that overlapped it: the setup and the row counts
        around a variant (full scans of the table) are not the variant's.

        pgbench writes its log through a 4 kB stdio buffer and SIGTERM ends it without a flush,
        so the last ~100 inserts (half a second at 200/s) never reach the file. Before the
        signal it runs until the log holds an insert that completed after the window: every
        insert of the window (a stalled one that completes late included) is then on disk."""
        if window is not None:
            deadline = time.time() + max(10.0, 3 * 4096 / 30 / self.rate)
            while time.time() < deadline and not any(done > window[1] for done, _ in self.logged()):
                time.sleep(0.05)
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait()
        lat, self.series = [], []
        for done, ms in self.logged():
            if window is None or (done >= window[0] and done - ms / 1000.0 <= window[1]):
                lat.append(ms)
            self.series.append((round(done - self.t0, 3), round(ms, 3)))
        self.series.sort()
        return lat


def latency(lat):
    """p50 and p99 (ms) of insert latencies, with the sample count."""
    lat = sorted(lat)
    if not lat:
        return {"p50_ms": None, "p99_ms": None, "samples": 0}
    pick = lambda q: lat[min(len(lat) - 1, int(q * len(lat)))]
    return {"p50_ms": round(pick(0.50), 3), "p99_ms": round(pick(0.99), 3), "samples": len(lat)}


def median_rep(reps):
    """The repetition with the median wall time, with every repetition's wall time beside it."""
    ordered = sorted(reps, key=lambda r: r["wall_s"])
    result = dict(ordered[(len(ordered) - 1) // 2])
    result["wall_s_all"] = [r["wall_s"] for r in reps]
    result["rows_per_s_all"] = [r["rows_per_s"] for r in reps]
    return result


def timed(c, name, fn):
    """Runs one variant after its setup (see SETUP); its rows are the expired rows counted before
    the clock starts (what a baseline deletes) unless the variant counts its own (ours, from the
    ledger or the archive index, read after the clock stops). Returns the result and the window
    (epoch seconds) the variant ran in, for Writer.stop."""
    setup, counter = SETUP.get(name, (None, None))
    if setup:
        setup(c)
    expected = expired(c)
    before = counter(c) if counter else None
    wal0 = c.wal_lsn()
    t0 = time.monotonic()
    began = time.time()
    fn()
    wall = time.monotonic() - t0
    window = (began, time.time())
    wal = c.wal_lsn() - wal0
    rows = counter(c) - before if counter else expected
    return {"rows": rows, "wall_s": round(wall, 3), "rows_per_s": round(rows / wall, 1) if wall > 0 else None,
            "wal_bytes": wal, "wal_bytes_per_row": round(wal / rows, 1) if rows else None}, window
