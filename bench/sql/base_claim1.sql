UPDATE bench_jobs
   SET status = 'running', attempts = attempts + 1, lease_until = now() + interval '2 min'
 WHERE id IN (SELECT id FROM bench_jobs
               WHERE queue = 'bench' AND status = 'pending' AND run_at <= now()
               ORDER BY priority DESC, run_at, id
               LIMIT 1
               FOR UPDATE SKIP LOCKED)
RETURNING id \gset
DELETE FROM bench_jobs WHERE id = :id;
