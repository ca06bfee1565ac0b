// pgq.wait_for_room and pgq.check_pending (SPEC §12, ADR 0029).
#include "pg/args.h"
#include "service/backpressure.h"
#include "service/queue_ref.h"
#include "service/rights.h"

extern "C" {
#include "funcapi.h"
}

using namespace pgq;

// wait_for_room(queue, wait) returns boolean
PGQ_FUNCTION(pgq_wait_for_room) {
  const std::string_view name = pg::QueueNameArg(fcinfo, 0);
  const int64 micros =
      pg::ArgIsNull(fcinfo, 1) ? 0 : pg::SpanMicros(PG_GETARG_INTERVAL_P(1), "wait");
  pg::SpiSession spi;
  PG_RETURN_BOOL(service::WaitForRoom(spi, name, static_cast<long>(micros / 1000)));
}

// check_pending(queue) returns (kept, found)
PGQ_FUNCTION(pgq_check_pending) {
  const std::string_view name = pg::QueueNameArg(fcinfo, 0);
  core::CountResult result;
  {
    pg::SpiSession spi;
    const service::QueueRef queue = service::FindQueueWithRight(spi, name, core::kAdmin);
    result = service::CheckPending(spi, queue.id, name);
  }
  TupleDesc desc = nullptr;
  pg::Guard([&] {
    if (get_call_result_type(fcinfo, nullptr, &desc) != TYPEFUNC_COMPOSITE) {
      elog(ERROR, "pgq.check_pending must return a composite type");
    }
    desc = BlessTupleDesc(desc);
  });
  Datum values[2] = {Int64GetDatum(result.kept), Int64GetDatum(result.found)};
  bool nulls[2] = {!result.was_known, false};
  return pg::Guard([&] { return HeapTupleGetDatum(heap_form_tuple(desc, values, nulls)); });
}
