// pgq.maintain(): one maintenance pass in the calling database. The
// background worker runs the same pass (service/maintain.h); without it,
// call this from cron.
#include "service/rights.h"
#include "pg/args.h"
#include "pg/queue_slots.h"
#include "pg/settings.h"
#include "service/compact.h"
#include "service/maintain.h"

using namespace pgq;

// maintain() returns (expired_requeued, expired_dead, finished_dropped, schedules_fired)
PGQ_FUNCTION(pgq_maintain) {
  {
    pg::SpiSession spi;
    service::RequireRightOnEveryQueue(spi, core::kAdmin, "run maintenance");
  }
  // One statement's clock for the whole pass, as the worker does.
  const TimestampTz now = pg::Now();
  service::PassCounts counts;
  for (bool more = true; more;) counts += service::RunMaintenanceBatch(now, &more);
  // Compacting holds pgq.job_rows exclusively until the caller commits: only
  // when that is the end of this statement, and never from an old snapshot.
  if (!IsTransactionBlock() && !IsolationUsesXactSnapshot()) {
    service::MaybeCompactJobs();
    service::MaybeCompactHolds();
  }
  TupleDesc desc = nullptr;
  pg::Guard([&] {
    if (get_call_result_type(fcinfo, nullptr, &desc) != TYPEFUNC_COMPOSITE) {
      elog(ERROR, "pgq.maintain must return a composite type");
    }
    desc = BlessTupleDesc(desc);
  });
  Datum values[4] = {Int64GetDatum(counts.expired_requeued), Int64GetDatum(counts.expired_dead),
                     Int64GetDatum(counts.finished_dropped), Int64GetDatum(counts.schedules_fired)};
  bool nulls[4] = {false, false, false, false};
  return pg::Guard([&] { return HeapTupleGetDatum(heap_form_tuple(desc, values, nulls)); });
}

// unflushed_completions(queue_id) returns bigint
PGQ_FUNCTION(pgq_unflushed_completions) {
  const int32 queue_id = pg::RequiredInt32(fcinfo, 0, "queue_id");
  {
    pg::SpiSession spi;
    service::RequireRightOnQueueId(spi, queue_id, core::kAllRights);
  }
  PG_RETURN_INT64(static_cast<int64>(pg::UnflushedFinished(queue_id)));
}
