"""The one cluster a benchmark run uses (scripts/cluster), and where things are."""
import os
import shutil
import subprocess
from pathlib import Path


ROOT = Path(__file__).resolve().parent.parent.parent
PG_BIN = Path("/usr/lib/postgresql/15/bin")
SCRATCH = Path("/var/tmp/pg_retention")
BATCH = 5000


def say(msg):
    print(f"[bench] {msg}", flush=True)


def free_port():
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Cluster:
    def __init__(self, port):
        self.port = port
        self.dir = SCRATCH / f"bench-{port}"
        self.data = self.dir / "data"

    def start(self):
        """A fresh cluster from scripts/cluster, the fixture the tests and the demo use."""
        if self.dir.exists():
            shutil.rmtree(self.dir)
        settings = [
            "shared_buffers = '1GB'",
            "max_wal_size = '8GB'",
            "checkpoint_timeout = '30min'",
            "pg_retention.enabled = on",
            "pg_retention.databases = 'postgres'",
            "pg_retention.naptime = '1h'",
            "pg_retention.max_rows_per_cycle = 2000000000",
        ]
        subprocess.run(["bash", str(ROOT / "scripts" / "cluster"), "start", str(self.dir), str(self.port), *settings],
                       check=True)

    def stop(self):
        subprocess.run(["bash", str(ROOT / "scripts" / "cluster"), "stop", str(self.dir)],
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        shutil.rmtree(self.dir, ignore_errors=True)

    def url(self):
        return f"host=127.0.0.1 port={self.port} user=postgres dbname=postgres"

    def sql(self, sql, quiet=True, options=""):
        out = subprocess.run(["psql", "-X", "-q", "-At", "-v", "ON_ERROR_STOP=1", "-h", "127.0.0.1", "-p",
                              str(self.port), "-U", "postgres", "-d", "postgres", "-c", sql],
                             check=True, capture_output=True, text=True,
                             env={**os.environ, "PGOPTIONS": f"-c client_min_messages=warning {options}"})
        return out.stdout.strip()

    def wal_lsn(self):
        return int(self.sql("SELECT pg_current_wal_lsn() - '0/0'::pg_lsn"))
