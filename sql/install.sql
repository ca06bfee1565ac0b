-- Installing: schema ownership, hardening, what pg_dump keeps.

-- A schema "pgq" that already exists (Skytools PgQ's, or one planted by
-- another role) is refused, never adopted.
CREATE SCHEMA pgq;
CREATE EXTENSION pgq_cpp;
SELECT count(*) AS objects_in_planted_schema
  FROM pg_class WHERE relnamespace = 'pgq'::regnamespace;
DROP SCHEMA pgq;

-- The schema is fixed.
CREATE EXTENSION pgq_cpp SCHEMA public;

CREATE EXTENSION pgq_cpp;
SELECT extname, extversion, extrelocatable FROM pg_extension WHERE extname = 'pgq_cpp';

-- The schema belongs to the extension, so DROP EXTENSION removes it.
SELECT count(*) AS schema_is_member
  FROM pg_depend
 WHERE classid = 'pg_namespace'::regclass AND objid = 'pgq'::regnamespace
   AND refobjid = (SELECT oid FROM pg_extension WHERE extname = 'pgq_cpp') AND deptype = 'e';

-- Queue state is dumped by pg_dump.
SELECT unnest(extconfig)::regclass::text AS dumped FROM pg_extension
 WHERE extname = 'pgq_cpp' ORDER BY 1;

-- The API, as installed.
SELECT p.proname, pg_get_function_identity_arguments(p.oid) AS arguments,
       pg_get_function_result(p.oid) AS result
  FROM pg_proc p WHERE p.pronamespace = 'pgq'::regnamespace ORDER BY 1, 2;

-- Settings, and the reserved prefix.
SHOW pgq.max_payload_bytes;
SHOW pgq.max_lease;
SET pgq.no_such_setting = 1;

DROP EXTENSION pgq_cpp;
SELECT count(*) AS pgq_schemas_left FROM pg_namespace WHERE nspname = 'pgq';
