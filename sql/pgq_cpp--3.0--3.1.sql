-- pgq_cpp 3.0 -> 3.1, run by ALTER EXTENSION pgq_cpp UPDATE. A fresh
-- CREATE EXTENSION runs the full script pgq_cpp--3.1.sql instead (ADR
-- 0024): every change here goes into that file too, as the objects' final
-- form; test/t/009_upgrade.pl proves the two agree. The rules of
-- pgq_cpp--1.0--1.1.sql hold: search_path pg_catalog only, every object of
-- ours qualified with pgq. and every operator with OPERATOR(pg_catalog.x).
--
-- Release 3.1 (issue 34): fair share, per-key rate limits and backpressure
-- (ADR 0029).

\echo Use "ALTER EXTENSION pgq_cpp UPDATE" to load this file. \quit

-- enqueue_many takes group and dedupe keys: one for every payload, or one
-- per payload (a tenant's bulk import names its key in one call).
DROP FUNCTION pgq.enqueue_many(text, jsonb[], timestamp with time zone, integer, bigint[]);
CREATE FUNCTION pgq.enqueue_many(
    queue       text,
    payloads    jsonb[],
    run_at      timestamptz DEFAULT pg_catalog.now(),
    priority    integer     DEFAULT 0,
    after       bigint[]    DEFAULT NULL,
    group_keys  text[]      DEFAULT NULL,
    dedupe_keys text[]      DEFAULT NULL)
RETURNS SETOF bigint AS 'MODULE_PATHNAME', 'pgq_enqueue_many' LANGUAGE C VOLATILE ROWS 100;
COMMENT ON FUNCTION pgq.enqueue_many(text, jsonb[], timestamp with time zone, integer, bigint[], text[], text[]) IS
    'adds one job per payload in one statement and returns their ids in input order; with after, each waits for those jobs (a fan-out behind one parent, or many children behind the same parents); group_keys and dedupe_keys: one key for every payload or one per payload (NULL: none), a taken dedupe key answered with its holder''s id as enqueue does; produce right';

-- Fairness across group keys (ADR 0029): a queue setting, create_queue's
-- and alter_queue's new last argument, queue_settings' new last column.
ALTER TABLE pgq.queues ADD COLUMN fairness text CHECK (fairness OPERATOR(pg_catalog.=) 'group');
-- rate_limit_per_key (3.1): at most that many of its jobs start per second
-- per group key, across every worker (NULL: no limit); its lanes hand out
-- in fair order to keep it.
ALTER TABLE pgq.queues ADD COLUMN rate_limit_per_key real;
-- max_pending (3.1): an enqueue, enqueue_many or publish that would take
-- the queue's unfinished jobs past it is refused whole (53400); NULL: no
-- limit (ADR 0029, "Backpressure, as built").
ALTER TABLE pgq.queues ADD COLUMN max_pending integer CHECK (max_pending OPERATOR(pg_catalog.>) 0);

DROP FUNCTION pgq.create_queue(text, integer, interval, interval, interval, interval, boolean, real, regprocedure, boolean, interval, interval, integer, integer);
CREATE FUNCTION pgq.create_queue(
    queue          text,
    max_attempts   integer     DEFAULT 5,
    lease          interval    DEFAULT '2 minutes',
    backoff_base   interval    DEFAULT '1 second',
    backoff_max    interval    DEFAULT '1 hour',
    retention      interval    DEFAULT '1 day',
    notify         boolean     DEFAULT false,
    rate_limit     real        DEFAULT NULL,
    handler        regprocedure DEFAULT NULL,
    if_not_exists  boolean     DEFAULT false,
    keep_completed interval    DEFAULT '0',
    keep_dead      interval    DEFAULT NULL,
    max_running    integer     DEFAULT NULL,
    group_concurrency integer  DEFAULT 1,
    fairness       text        DEFAULT NULL,
    rate_limit_per_key real    DEFAULT NULL,
    max_pending    integer     DEFAULT NULL)
RETURNS void AS 'MODULE_PATHNAME', 'pgq_create_queue' LANGUAGE C VOLATILE;
COMMENT ON FUNCTION pgq.create_queue(text, integer, interval, interval, interval, interval, boolean, real, regprocedure, boolean, interval, interval, integer, integer, text, real, integer) IS
    'creates a queue owned by the calling role (the admin right on every queue): its default max_attempts, lease, backoff, retention, NOTIFY, rate limits, in-database handler, how long completed and dead jobs are kept, its concurrency caps, its fairness across group keys and its max_pending';

DROP FUNCTION pgq.alter_queue(text, integer, interval, interval, interval, interval, boolean, real, regprocedure, interval, interval, integer, integer);
CREATE FUNCTION pgq.alter_queue(
    queue          text,
    max_attempts   integer     DEFAULT NULL,
    lease          interval    DEFAULT NULL,
    backoff_base   interval    DEFAULT NULL,
    backoff_max    interval    DEFAULT NULL,
    retention      interval    DEFAULT NULL,
    notify         boolean     DEFAULT NULL,
    rate_limit     real        DEFAULT NULL,
    handler        regprocedure DEFAULT NULL,
    keep_completed interval    DEFAULT NULL,
    keep_dead      interval    DEFAULT NULL,
    max_running    integer     DEFAULT NULL,
    group_concurrency integer  DEFAULT NULL,
    fairness       text        DEFAULT NULL,
    rate_limit_per_key real    DEFAULT NULL,
    max_pending    integer     DEFAULT NULL)
RETURNS void AS 'MODULE_PATHNAME', 'pgq_alter_queue' LANGUAGE C VOLATILE;
COMMENT ON FUNCTION pgq.alter_queue(text, integer, interval, interval, interval, interval, boolean, real, regprocedure, interval, interval, integer, integer, text, real, integer) IS
    'changes the settings given (NULL: unchanged; rate_limit => 0, rate_limit_per_key => 0, max_running => 0 and max_pending => 0 remove the limit, fairness => ''none'' the fairness); the handler only by the queue''s owner; admin right';

DROP FUNCTION pgq.queue_settings(text);
CREATE FUNCTION pgq.queue_settings(
    queue text DEFAULT NULL,
    OUT queue_name text, OUT max_attempts integer, OUT lease interval,
    OUT backoff_base interval, OUT backoff_max interval, OUT retention interval,
    OUT keep_completed interval, OUT keep_dead interval, OUT notify boolean,
    OUT rate_limit real, OUT max_running integer, OUT group_concurrency integer,
    OUT handler text, OUT owner name, OUT paused boolean, OUT created_at timestamptz,
    OUT fairness text, OUT rate_limit_per_key real, OUT max_pending integer)
RETURNS SETOF record AS 'MODULE_PATHNAME', 'pgq_queue_settings' LANGUAGE C STABLE ROWS 10;
COMMENT ON FUNCTION pgq.queue_settings(text) IS
    'the settings of a queue (NULL: of every queue the caller holds a right on); any right';

-- Weights of a fair queue's group keys (issue 34, ADR 0029): a key with
-- weight w gets w turns for each turn of a key of weight 1; a key without
-- a row weighs 1. Written by pgq.set_group_weight, read by the claims'
-- lanes (through the invalidation of pgq.queues, ADR 0027).
CREATE TABLE pgq.group_weights (
    queue_id  integer NOT NULL REFERENCES pgq.queues ON DELETE CASCADE,
    group_key text    NOT NULL,
    weight    integer NOT NULL CHECK (weight OPERATOR(pg_catalog.>=) 1 AND weight OPERATOR(pg_catalog.<=) 1000),
    PRIMARY KEY (queue_id, group_key)
);
COMMENT ON TABLE pgq.group_weights IS
    'weights of a fair queue''s group keys other than 1 (pgq.set_group_weight)';
SELECT pg_catalog.pg_extension_config_dump('pgq.group_weights', '');

CREATE FUNCTION pgq.set_group_weight(queue text, group_key text, weight integer)
RETURNS void AS 'MODULE_PATHNAME', 'pgq_set_group_weight' LANGUAGE C VOLATILE;
COMMENT ON FUNCTION pgq.set_group_weight(text, text, integer) IS
    'sets how many turns a group key of a fair queue gets for each turn of a key of weight 1 (1-1000; 1 or NULL: the default); admin right';

CREATE FUNCTION pgq.group_weights(queue text, OUT group_key text, OUT weight integer)
RETURNS SETOF record AS 'MODULE_PATHNAME', 'pgq_group_weights' LANGUAGE C STABLE ROWS 10;
COMMENT ON FUNCTION pgq.group_weights(text) IS
    'the group keys of a queue whose weight is not 1, with their weights; any right';

CREATE FUNCTION pgq.fair_keys(
    queue text, max_keys integer DEFAULT 20,
    OUT group_key text, OUT weight integer, OUT held integer, OUT more boolean,
    OUT running integer, OUT served bigint, OUT waiting interval)
RETURNS SETOF record AS 'MODULE_PATHNAME', 'pgq_fair_keys' LANGUAGE C VOLATILE ROWS 20;
COMMENT ON FUNCTION pgq.fair_keys(text, integer) IS
    'the busiest group keys of a fair queue (the most claims since each became active first): weight, ready jobs its lane holds sorted, whether more wait, jobs running, claims, how long its next job has been ready; any right';

-- Backpressure (issue 34, ADR 0029): a producer waits here for the room
-- max_pending refused it, woken by the commits that finish jobs.
CREATE FUNCTION pgq.wait_for_room(queue text, wait interval DEFAULT '0')
RETURNS boolean AS 'MODULE_PATHNAME', 'pgq_wait_for_room' LANGUAGE C VOLATILE;
COMMENT ON FUNCTION pgq.wait_for_room(text, interval) IS
    'sleeps up to wait until the queue''s unfinished jobs are below its low-water mark (nine tenths of max_pending, rounded up), woken by the commits that finish its jobs; true if they are (at once without max_pending), false if the wait ran out; produce or admin right';

CREATE FUNCTION pgq.check_pending(queue text, OUT kept bigint, OUT found bigint)
RETURNS record AS 'MODULE_PATHNAME', 'pgq_check_pending' LANGUAGE C VOLATILE;
COMMENT ON FUNCTION pgq.check_pending(text) IS
    'counts the queue''s unfinished jobs (rows, ring entries, dedupe followers) and compares them with the count max_pending keeps: kept (NULL if it was not kept yet) and found, at the same instant; the kept count becomes what was found; admin right';
