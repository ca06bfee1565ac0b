// SQL fragments shared by the statements that move jobs out of pgq.jobs.
// Each follows a CTE named `d` that holds the deleted pgq.jobs rows.
#pragma once

// Into dead-letter, the job kept whole. The queue name comes from a scalar
// subquery into a NOT NULL column: if the queue were somehow gone, the
// statement fails instead of losing the job. Returns one row per job: its
// queue id and group key (the group moves on, api/groups.h).
#define PGQ_BURY_DELETED(last_error, reason, died_at)                                       \
  "INSERT INTO pgq.dead_jobs (id, queue, payload, attempts, last_error, reason, died_at, "  \
  "                           priority, max_attempts, enqueued_at, dedupe_key, group_key) " \
  "SELECT d.id, (SELECT name FROM pgq.queues q WHERE q.queue_id = d.queue_id), d.payload, " \
  "       d.attempt, " last_error ", '" reason "', " died_at                                \
  ", d.priority, "                                                                          \
  "       d.max_attempts, d.enqueued_at, d.dedupe_key, d.group_key FROM d "                 \
  "RETURNING (SELECT q.queue_id FROM pgq.queues q WHERE q.name = dead_jobs.queue), group_key"

// Sums the rows of `d` per queue and returns how many there were (column
// 1), with the groups whose head they were and the queues where they were
// pending, i.e. locked by this statement (columns 2-4: queue id, group key
// or NULL, was pending; a single row of NULLs when neither), the ids of
// every queue it finished jobs of (column 5, an int4[] in ascending order,
// the same in every row; NULL when none) and how many of each (column 6, an
// int4[] in the same order). The caller counts them (CountFinished): in
// shared memory when preloaded, one pgq.finished row per queue otherwise.
#define PGQ_COUNT_FINISHED                                                              \
  ", f AS (SELECT d.queue_id, count(*)::int4 AS jobs FROM d GROUP BY d.queue_id) "      \
  "SELECT (SELECT count(*) FROM d), g.queue_id, g.group_key, g.was_pending, "           \
  "       (SELECT array_agg(f.queue_id ORDER BY f.queue_id) FROM f), "                  \
  "       (SELECT array_agg(f.jobs ORDER BY f.queue_id) FROM f) "                       \
  "  FROM (SELECT) AS one "                                                             \
  "  LEFT JOIN (SELECT DISTINCT d.queue_id, d.group_key, d.state = 'p' AS was_pending " \
  "              FROM d WHERE d.group_key IS NOT NULL OR d.state = 'p') g ON true"
