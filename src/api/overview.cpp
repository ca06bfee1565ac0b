// pgq.queue_overview(exact_up_to): what the dashboard's overview shows, at
// a cost that does not grow with the queues' depth. pgq.queue_stats counts
// every job of every queue each time it is read (a million pending jobs: a
// fifth of a second); this counts each state of each queue through an
// index, exactly up to exact_up_to, and estimates past it from the
// planner's statistics, marking the row (store::ReadQueueOverview, ADR
// 0018). Rights as queue_stats: the queues the caller holds some right on.
#include "service/rights.h"
#include "pg/args.h"
#include "pg/settings.h"
#include "store/jobs.h"

extern "C" {
#include "funcapi.h"
#include "utils/timestamp.h"
}

namespace pgq::api {

namespace {

constexpr int32 kMaxExactUpTo = 1000000;
constexpr int kColumns = 12;

}  // namespace

}  // namespace pgq::api

using namespace pgq;

// queue_overview(exact_up_to) returns SETOF (queue, ready, scheduled,
// running, expired, dead, done_recent, oldest_ready_age, paused,
// max_running, awaiting_parents, estimated)
PGQ_FUNCTION(pgq_queue_overview) {
  const int32 exact_up_to = pg::RequiredInt32(fcinfo, 0, "exact_up_to");
  if (exact_up_to < 1 || exact_up_to > api::kMaxExactUpTo) {
    pg::Raise(ERRCODE_INVALID_PARAMETER_VALUE,
              "exact_up_to must be between 1 and " + std::to_string(api::kMaxExactUpTo));
  }
  ReturnSetInfo* rsinfo = reinterpret_cast<ReturnSetInfo*>(fcinfo->resultinfo);
  pg::Guard([&] { InitMaterializedSRF(fcinfo, MAT_SRF_USE_EXPECTED_DESC); });
  pg::SpiSession spi;
  const TimestampTz now = pg::Now();
  const std::vector<store::QueueOverview> queues = store::ReadQueueOverview(
      spi, service::QueuesWithRight(spi, core::kAllRights), exact_up_to, now);
  for (const store::QueueOverview& q : queues) {
    Datum values[api::kColumns] = {pg::TextDatum(q.name),
                                   Int64GetDatum(q.ready),
                                   Int64GetDatum(q.scheduled),
                                   Int64GetDatum(q.running),
                                   Int64GetDatum(q.expired),
                                   Int64GetDatum(q.dead),
                                   Int64GetDatum(q.done_recent),
                                   0,
                                   BoolGetDatum(q.paused),
                                   Int32GetDatum(q.max_running.value_or(0)),
                                   Int64GetDatum(q.awaiting_parents),
                                   BoolGetDatum(q.estimated)};
    bool nulls[api::kColumns] = {};
    nulls[7] = !q.oldest_ready.has_value();
    nulls[9] = !q.max_running.has_value();
    pg::Guard([&] {
      if (q.oldest_ready) {
        values[7] = DirectFunctionCall2(timestamp_mi, TimestampTzGetDatum(now),
                                        TimestampTzGetDatum(*q.oldest_ready));
      }
      tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
    });
  }
  return static_cast<Datum>(0);
}
