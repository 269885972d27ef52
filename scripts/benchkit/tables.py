"""The tables every variant starts from, built identically from templates."""


def ensure_template(c, rows):
    """The rows every variant's table is filled with, built once per size."""
    if c.sql("SELECT to_regclass('template_t') IS NOT NULL") != "t" or \
            c.sql("SELECT count(*) FROM template_t") != str(rows):
        c.sql("DROP TABLE IF EXISTS template_t")
        c.sql(f"""
            CREATE UNLOGGED TABLE template_t AS
            SELECT g::bigint AS id,
                   now() - (({rows} - g)::float8 / {rows}) * interval '60 days' AS created_at,
                   'sent'::text AS status,
                   jsonb_build_object('event', g, 'type', 'order.updated', 'tenant', g % 97,
                                      'body', repeat(md5(g::text), 4)) AS payload
              FROM generate_series(1, {rows}) g""")


def build_table(c, rows):
    """The identical table every variant starts from, copied from a template built once."""
    c.sql("DROP TABLE IF EXISTS t CASCADE")
    ensure_template(c, rows)
    c.sql("""
        CREATE TABLE t (id bigserial PRIMARY KEY, created_at timestamptz NOT NULL, status text NOT NULL,
                        payload jsonb NOT NULL);
        INSERT INTO t SELECT * FROM template_t ORDER BY id;
        SELECT setval('t_id_seq', (SELECT max(id) FROM t));
        CREATE INDEX t_created_at ON t (created_at);""")
    c.sql("VACUUM ANALYZE t")
    c.sql("CHECKPOINT")


def build_wide(c, rows):
    """The wide audit table of the archive_wide variants: the shape audit tables have (a state,
    an actor, an amount, a jsonb body of ~200 bytes with an IP and a 100-character note; ~300
    bytes a row), `rows` rows over 60 days, the older half expired; copied from a template built
    once. Its columns keep the names the policies here use (status, created_at)."""
    c.sql("DROP TABLE IF EXISTS t CASCADE")
    if c.sql("SELECT to_regclass('template_w') IS NOT NULL") != "t" or \
            c.sql("SELECT count(*) FROM template_w") != str(rows):
        c.sql("DROP TABLE IF EXISTS template_w")
        c.sql(f"""
            CREATE UNLOGGED TABLE template_w AS
            SELECT g::bigint AS id, 'sent'::text AS status,
                   now() - (({rows} - g)::float8 / {rows}) * interval '60 days' AS created_at,
                   'user-' || (g % 5000) || '@example.com' AS actor,
                   round((g % 100000)::numeric / 7, 2)::numeric(12,2) AS amount,
                   jsonb_build_object('ip', '10.' || (g % 256) || '.' || (g / 256 % 256) || '.' || (g % 199),
                                      'action', 'order.refund', 'request', g, 'agent', 'Mozilla/5.0 (X11; Linux)',
                                      'note', repeat(md5(g::text), 3) || 'note') AS body
              FROM generate_series(1, {rows}) g""")
    c.sql("""
        CREATE TABLE t (id bigserial PRIMARY KEY, status text NOT NULL, created_at timestamptz NOT NULL,
                        actor text NOT NULL, amount numeric(12,2) NOT NULL, body jsonb NOT NULL);
        INSERT INTO t SELECT * FROM template_w ORDER BY id;
        SELECT setval('t_id_seq', (SELECT max(id) FROM t));
        CREATE INDEX t_created_at ON t (created_at);""")
    c.sql("VACUUM ANALYZE t")
    c.sql("CHECKPOINT")


def build_partitioned(c, rows):
    """The same rows in a table partitioned by day by pg_partman (61 leaves back from today, two
    premade ahead, its default partition), pg_partman's retention not set."""
    c.sql("DROP TABLE IF EXISTS t CASCADE")
    c.sql("DELETE FROM partman.part_config WHERE parent_table = 'public.t'")
    c.sql("DROP TABLE IF EXISTS partman.template_public_t")
    ensure_template(c, rows)
    c.sql("""
        CREATE TABLE t (id bigserial, created_at timestamptz NOT NULL, status text NOT NULL, payload jsonb NOT NULL,
                        PRIMARY KEY (id, created_at)) PARTITION BY RANGE (created_at);
        SELECT partman.create_parent('public.t', 'created_at', 'native', 'daily', p_premake := 2,
                                     p_start_partition := (date_trunc('day', now()) - interval '61 days')::text);
        INSERT INTO t SELECT * FROM template_t;
        SELECT setval('t_id_seq', (SELECT max(id) FROM t));
        CREATE INDEX t_created_at ON t (created_at);""")
    c.sql("VACUUM ANALYZE t")
    c.sql("CHECKPOINT")


def expired(c):
    return int(c.sql("SELECT count(*) FROM t WHERE created_at < now() - interval '30 days'"))
