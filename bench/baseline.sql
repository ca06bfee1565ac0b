-- The hand-written plain-SQL queue that pgq_cpp is measured against.
--
-- The classic design: one table, a status column, a partial index on the
-- pending rows in claim order, claim = UPDATE .. WHERE id IN (SELECT .. FOR
-- UPDATE SKIP LOCKED) RETURNING id, complete = DELETE. No fencing, no lease
-- index, no finished-job log: the cheapest queue that is still correct for
-- concurrent workers.

CREATE TABLE bench_jobs (
    id          bigserial   PRIMARY KEY,
    queue       text        NOT NULL,
    status      text        NOT NULL DEFAULT 'pending'
                            CHECK (status IN ('pending', 'running')),
    priority    integer     NOT NULL DEFAULT 0,
    run_at      timestamptz NOT NULL DEFAULT now(),
    attempts    integer     NOT NULL DEFAULT 0,
    lease_until timestamptz,
    payload     jsonb       NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now()
);

-- Matches the claim's WHERE and ORDER BY exactly.
CREATE INDEX bench_jobs_pending_idx ON bench_jobs (queue, priority DESC, run_at, id)
    WHERE status = 'pending';

-- PostgreSQL's own ceiling: one row per client, so a single-row UPDATE per
-- transaction never waits on another client's row lock. fillfactor leaves
-- room for HOT updates.
CREATE TABLE ceiling (
    id integer PRIMARY KEY,
    v  bigint  NOT NULL DEFAULT 0
) WITH (fillfactor = 20);
INSERT INTO ceiling (id) SELECT g FROM generate_series(0, 63) AS g;
