// A queue's jobs as a whole: counted before a drop, purged by a forced one,
// and the gauges of pgq.metrics().
#include "store/catalog.h"
#include "store/internal.h"

namespace pgq::store {

namespace {

pg::Statement queue_holds_jobs = {R"sql(
SELECT (SELECT count(*) FROM pgq.jobs WHERE queue_id = $1)
     + (SELECT count(*) FROM pgq.dead_jobs WHERE queue = $2))sql",
                                  2,
                                  {INT4OID, TEXTOID},
                                  nullptr};

pg::Statement delete_queue_jobs = {
    "DELETE FROM pgq.jobs WHERE queue_id = $1", 1, {INT4OID}, nullptr};
// 1.2: the jobs that had dependents (in other queues too) die to them.
pg::Statement delete_queue_parents = {R"sql(
WITH d AS (DELETE FROM pgq.jobs WHERE queue_id = $1 RETURNING id, has_dependents)
SELECT id FROM d WHERE has_dependents)sql",
                                      1,
                                      {INT4OID},
                                      nullptr};
pg::Statement delete_queue_dead = {
    "DELETE FROM pgq.dead_jobs WHERE queue = $1", 1, {TEXTOID}, nullptr};

// $1 now. Waiting jobs of a FIFO group count as ready, as in
// pgq.queue_stats. Rows stored with an infinite run_at (refused since 1.2)
// are left out of the age: subtracting one would fail the whole statement.
// 1.2: jobs waiting for their parents are neither ready nor scheduled;
// also the queue's max_running (NULL: none).
pg::Statement queue_gauges_1_2 = {R"sql(
SELECT q.queue_id, q.name,
       count(j.id) FILTER (WHERE j.state NOT IN ('r', 'b') AND j.run_at <= $1),
       count(j.id) FILTER (WHERE j.state NOT IN ('r', 'b') AND j.run_at > $1),
       count(j.id) FILTER (WHERE j.state = 'r'),
       count(j.id) FILTER (WHERE j.state = 'r' AND j.lease_until < $1),
       (SELECT count(*) FROM pgq.dead_jobs d WHERE d.queue = q.name),
       COALESCE(EXTRACT(epoch FROM $1 - min(j.run_at)
                  FILTER (WHERE j.state NOT IN ('r', 'b') AND j.run_at <= $1
                            AND pg_catalog.isfinite(j.run_at))), 0)::float8,
       q.paused,
       count(j.id) FILTER (WHERE j.state = 'b'),
       q.max_running
  FROM pgq.queues q LEFT JOIN pgq.jobs j ON j.queue_id = q.queue_id
 GROUP BY q.queue_id ORDER BY q.name)sql",
                                  1,
                                  {TIMESTAMPTZOID},
                                  nullptr};

pg::Statement queue_gauges = {R"sql(
SELECT q.queue_id, q.name,
       count(j.id) FILTER (WHERE j.state <> 'r' AND j.run_at <= $1),
       count(j.id) FILTER (WHERE j.state <> 'r' AND j.run_at > $1),
       count(j.id) FILTER (WHERE j.state = 'r'),
       count(j.id) FILTER (WHERE j.state = 'r' AND j.lease_until < $1),
       (SELECT count(*) FROM pgq.dead_jobs d WHERE d.queue = q.name),
       COALESCE(EXTRACT(epoch FROM $1 - min(j.run_at)
                  FILTER (WHERE j.state <> 'r' AND j.run_at <= $1
                            AND pg_catalog.isfinite(j.run_at))), 0)::float8,
       q.paused
  FROM pgq.queues q LEFT JOIN pgq.jobs j ON j.queue_id = q.queue_id
 GROUP BY q.queue_id ORDER BY q.name)sql",
                              1,
                              {TIMESTAMPTZOID},
                              nullptr};

}  // namespace

int64 CountQueueJobs(pg::SpiSession& spi, int32 queue_id, Datum name) {
  pg::Params params;
  params.Set(0, Int32GetDatum(queue_id)).Set(1, name);
  return spi.Execute(queue_holds_jobs, params).Int64(0, 1);
}

void PurgeQueueJobs(pg::SpiSession& spi, int32 queue_id, Datum name, TimestampTz now) {
  pg::Params by_id;
  by_id.Set(0, Int32GetDatum(queue_id));
  if (InstalledCatalog().dependencies) {
    internal::ParentsDied(spi, spi.Execute(delete_queue_parents, by_id), now);
  } else {
    spi.Execute(delete_queue_jobs, by_id);
  }
  pg::Params by_name;
  by_name.Set(0, name);
  spi.Execute(delete_queue_dead, by_name);
}

pg::Result ReadQueueGauges(pg::SpiSession& spi, TimestampTz now) {
  pg::Params params;
  params.Set(0, TimestampTzGetDatum(now));
  return spi.Execute(InstalledCatalog().dependencies ? queue_gauges_1_2 : queue_gauges, params);
}

}  // namespace pgq::store
