"""A pgqueuer worker, as an application runs one: consumes jobs until SIGTERM.

Entrypoints: `work` (finishes; payload b"fail" raises, which pgqueuer logs as `exception`),
`flaky` (raises with on_failure="hold": the job stays in the queue as `failed`, live, for an
operator to requeue), `slow` (runs until the worker stops: a job that stays `picked`).
Jobs of entrypoints no worker serves stay `queued`.
"""

import asyncio
import signal
import sys
from datetime import timedelta

import psycopg
from pgqueuer import PsycopgDriver, QueueManager, Queries


async def main(dsn: str) -> None:
    conn = await psycopg.AsyncConnection.connect(dsn, autocommit=True)
    qm = QueueManager(Queries(PsycopgDriver(conn)))
    stop = asyncio.Event()

    @qm.entrypoint("work")
    async def work(job) -> None:
        if job.payload == b"fail":
            raise RuntimeError("failed on purpose")

    @qm.entrypoint("flaky", on_failure="hold")
    async def flaky(job) -> None:
        raise RuntimeError("held for an operator")

    @qm.entrypoint("slow")
    async def slow(job) -> None:
        await stop.wait()

    loop = asyncio.get_running_loop()

    def shutdown() -> None:
        stop.set()
        qm.shutdown.set()

    loop.add_signal_handler(signal.SIGTERM, shutdown)
    loop.add_signal_handler(signal.SIGINT, shutdown)
    print("worker ready", flush=True)
    await qm.run(
        dequeue_timeout=timedelta(seconds=1),
        batch_size=10,
        log_aggregation_interval=timedelta(seconds=1),
    )
    await conn.close()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1]))
