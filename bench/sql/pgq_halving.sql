-- The commit-halving pattern: one transaction completes the previous batch
-- and claims the next, so a batch costs one commit instead of two. The first
-- round completes nothing (run.sh passes -D ids={} -D attempts={}). pgbench's
-- \gset stores a NULL as an empty string, which is no array: COALESCE turns an
-- empty claim into '{}'.
BEGIN;
SELECT pgq.complete_many(:ids, :attempts);
SELECT COALESCE(array_agg(id), '{}') AS ids, COALESCE(array_agg(attempt), '{}') AS attempts
  FROM pgq.claim('bench', :n) \gset
COMMIT;
