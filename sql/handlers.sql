-- In-database handlers: what create_queue and alter_queue check. Running
-- them takes the background workers (test/t/006_handlers.pl).
CREATE EXTENSION pgq_cpp;

CREATE FUNCTION pg_temp.error_of(sql text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
  EXECUTE sql;
  RETURN 'no error';
EXCEPTION WHEN OTHERS THEN
  RETURN SQLSTATE || ': ' || SQLERRM;
END
$$;

CREATE FUNCTION public.recompute(job pgq.claimed_job) RETURNS void LANGUAGE sql AS $$ SELECT $$;
CREATE FUNCTION public.two_args(job pgq.claimed_job, x int) RETURNS void LANGUAGE sql AS $$ SELECT $$;
CREATE FUNCTION public.wrong_type(job jsonb) RETURNS void LANGUAGE sql AS $$ SELECT $$;
CREATE PROCEDURE public.a_procedure(job pgq.claimed_job) LANGUAGE sql AS $$ SELECT $$;
CREATE FUNCTION public.private(job pgq.claimed_job) RETURNS void LANGUAGE sql AS $$ SELECT $$;
REVOKE EXECUTE ON FUNCTION public.private(pgq.claimed_job) FROM PUBLIC;

-- The handler is stored by its qualified signature; the creating role owns
-- the queue and is the role handlers run as.
SELECT pgq.create_queue('passes', handler => 'recompute(pgq.claimed_job)');
SELECT name, handler, owner = current_user AS owned_by_creator FROM pgq.queues;

-- alter_queue sets, keeps (NULL) and removes (0) the handler.
SELECT pgq.create_queue('plain');
SELECT pgq.alter_queue('plain', handler => 'public.recompute(pgq.claimed_job)');
SELECT pgq.alter_queue('plain', max_attempts => 3);
SELECT name, handler FROM pgq.queues ORDER BY name;
SELECT pgq.alter_queue('plain', handler => 0::regprocedure);
SELECT name, handler FROM pgq.queues ORDER BY name;

-- A role that may not execute the handler cannot make it its queue's.
CREATE ROLE pgq_regress_app;
SELECT pgq.grant('pgq_regress_app', NULL, 'admin');  -- may create queues
SET ROLE pgq_regress_app;
SELECT pg_temp.error_of($$SELECT pgq.create_queue('mine', handler => 'public.private(pgq.claimed_job)')$$);
SELECT pgq.create_queue('mine', handler => 'public.recompute(pgq.claimed_job)');
RESET ROLE;
-- alter_queue checks the queue's owner, not the caller (a superuser here).
SELECT pg_temp.error_of($$SELECT pgq.alter_queue('mine', handler => 'public.private(pgq.claimed_job)')$$);
SELECT name, handler, owner FROM pgq.queues WHERE name = 'mine';
-- The handler runs as the owner, so choosing it is the owner's: a role with
-- the admin right on the queue (but not its owner) may change its settings
-- but not its handler.
CREATE ROLE pgq_regress_ops;
SELECT pgq.grant('pgq_regress_ops', 'mine', 'admin');
SET ROLE pgq_regress_ops;
SELECT pgq.alter_queue('mine', max_attempts => 7);
SELECT pg_temp.error_of($$SELECT pgq.alter_queue('mine', handler => 'public.recompute(pgq.claimed_job)')$$);
SELECT pg_temp.error_of($$SELECT pgq.alter_queue('mine', handler => 0::regprocedure)$$);
RESET ROLE;
SELECT name, handler, owner, max_attempts FROM pgq.queues WHERE name = 'mine';
DROP ROLE pgq_regress_ops;

-- Wrong shapes are refused when the queue is made, not when a job runs.
\set VERBOSITY default
SELECT pgq.create_queue('bad', handler => 'public.two_args(pgq.claimed_job, int)');
SELECT s AS statement, pg_temp.error_of(s) AS error FROM (VALUES
  ($$SELECT pgq.create_queue('bad', handler => 'public.wrong_type(jsonb)')$$),
  ($$SELECT pgq.create_queue('bad', handler => 'public.a_procedure(pgq.claimed_job)')$$),
  ($$SELECT pgq.create_queue('bad', handler => 'pg_catalog.now()')$$),
  ($$SELECT pgq.create_queue('bad', handler => 'public.missing(pgq.claimed_job)')$$),
  ($$SELECT pgq.create_queue('bad', handler => 4294967295::oid::regprocedure)$$),
  ($$SELECT pgq.alter_queue('missing', handler => 'public.recompute(pgq.claimed_job)')$$)
) AS t(s);
SELECT count(*) AS queues FROM pgq.queues;

-- The handlers depend on pgq.claimed_job: they go first.
DROP FUNCTION public.recompute(pgq.claimed_job), public.two_args(pgq.claimed_job, int),
              public.private(pgq.claimed_job), public.wrong_type(jsonb);
DROP PROCEDURE public.a_procedure(pgq.claimed_job);
DROP OWNED BY pgq_regress_app;
DROP ROLE pgq_regress_app;
DROP EXTENSION pgq_cpp;
