//! A job queue as job libraries lay it out, for the tests that govern one: jobs (finished or
//! running) and their events, which reference them ON DELETE CASCADE.

use postgres::Client;

/// The tables: 20 jobs per queue in 3 queues once filled; each job has 3 events.
pub const JOBS: &str = "
    CREATE TABLE jobs (id bigint PRIMARY KEY, queue text NOT NULL, state text NOT NULL,
                       finished_at timestamptz);
    CREATE TABLE job_events (id bigserial PRIMARY KEY,
                             job_id bigint NOT NULL REFERENCES jobs (id) ON DELETE CASCADE,
                             at timestamptz NOT NULL, kind text NOT NULL);";

/// 60 jobs (job j finished j hours ago; those with j % 5 = 0 still running), 3 events each,
/// written by `app`.
pub fn fill_jobs(app: &mut Client) {
    app.batch_execute(
        "INSERT INTO jobs
         SELECT g, 'q' || (g % 3), CASE WHEN g % 5 = 0 THEN 'running' ELSE 'done' END,
                CASE WHEN g % 5 = 0 THEN NULL ELSE now() - make_interval(hours => g) END
           FROM generate_series(1, 60) g;
         INSERT INTO job_events (job_id, at, kind)
         SELECT j, now() - make_interval(hours => j), k
           FROM generate_series(1, 60) j, unnest(ARRAY['queued', 'started', 'finished']) k;",
    )
    .unwrap();
}
