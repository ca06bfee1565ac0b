-- The C/C++ boundary: PostgreSQL errors raised inside guarded calls keep
-- their SQLSTATE, and errors cost no memory.
\set VERBOSITY default
\set SHOW_CONTEXT never
CREATE EXTENSION pgq_cpp;
SELECT pgq.create_queue('empty');

-- A cancel raised inside the claim's wait (CHECK_FOR_INTERRUPTS in a guarded
-- call) reaches the client as query_canceled (57014), and the session is fine.
SET statement_timeout = '200ms';
DO $$
BEGIN
  PERFORM pgq.claim('empty', 1, wait => '30 seconds');
  RAISE NOTICE 'not cancelled';
EXCEPTION WHEN query_canceled THEN
  RAISE NOTICE 'caught % (%)', SQLSTATE, SQLERRM;
END
$$;
SELECT * FROM pgq.claim('empty', 1, wait => '30 seconds');
RESET statement_timeout;
SELECT count(*) AS session_usable FROM pgq.claim('empty');

-- A PostgreSQL error raised inside SPI crosses the C++ frames with its
-- SQLSTATE: in a read-only transaction our INSERT fails in the executor
-- with read_only_sql_transaction (25006).
\set VERBOSITY terse
BEGIN READ ONLY;
SELECT pgq.enqueue('empty', '{}');
ROLLBACK;
\set VERBOSITY default
-- A role without a grant is refused by pgq_cpp before any statement runs
-- (insufficient_privilege, 42501), whatever it passes.
CREATE ROLE pgq_regress_outsider;
GRANT USAGE ON SCHEMA pgq TO pgq_regress_outsider;
SET ROLE pgq_regress_outsider;
SELECT pgq.enqueue('empty', '{}');
SELECT pgq.complete(1, 1);
RESET ROLE;

-- 100,000 errors in one session leave the backend's memory flat, on both
-- paths: errors raised by pgq_cpp itself (undefined_object) and PostgreSQL
-- errors re-raised through the boundary (read_only_sql_transaction, from
-- inside SPI).
CREATE FUNCTION pg_temp.backend_bytes() RETURNS bigint LANGUAGE sql AS
  'SELECT sum(used_bytes)::bigint FROM pg_backend_memory_contexts';
-- Runs `sql` n times, each in its own subtransaction; returns how many raised
-- undefined_object or read_only_sql_transaction (the two paths below).
CREATE FUNCTION pg_temp.error_loop(sql text, n int) RETURNS int LANGUAGE plpgsql AS $$
DECLARE
  caught int := 0;
BEGIN
  FOR i IN 1..n LOOP
    BEGIN
      EXECUTE sql;
    EXCEPTION WHEN undefined_object OR read_only_sql_transaction THEN
      caught := caught + 1;
    END;
  END LOOP;
  RETURN caught;
END
$$;
SELECT pg_temp.error_loop($$SELECT pgq.enqueue('no_such_queue', '{}')$$, 1000) AS warmup;
SELECT pg_temp.backend_bytes() AS before_user_errors \gset
SELECT pg_temp.error_loop($$SELECT pgq.enqueue('no_such_queue', '{}')$$, 100000) AS user_errors;
SELECT pg_temp.backend_bytes() - :before_user_errors < 64 * 1024 AS memory_flat_after_user_errors;

BEGIN READ ONLY;
SELECT pg_temp.error_loop($$SELECT pgq.enqueue('empty', '{}')$$, 1000) AS warmup;
SELECT pg_temp.backend_bytes() AS before_pg_errors \gset
SELECT pg_temp.error_loop($$SELECT pgq.enqueue('empty', '{}')$$, 100000) AS postgres_errors;
SELECT pg_temp.backend_bytes() - :before_pg_errors < 64 * 1024 AS memory_flat_after_postgres_errors;
COMMIT;

DROP EXTENSION pgq_cpp;
DROP ROLE pgq_regress_outsider;
