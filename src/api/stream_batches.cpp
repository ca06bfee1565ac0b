// pgq.register_consumer, unregister_consumer, next_batch, finish_batch and
// stream_consumer_stats (SPEC §10): arguments, rights and next_batch's wait;
// the statements are the streams store's (store/stream_batches.cpp).
#include <chrono>

#include "service/rights.h"
#include "service/stream_rights.h"
#include "core/wait.h"
#include "pg/trace_context.h"
#include "pg/args.h"
#include "pg/channel_wait.h"
#include "pg/settings.h"
#include "pg/subtransaction.h"

namespace pgq::api {

namespace {

// A waiting next_batch is woken by the commits that append to its stream;
// it also looks again every pgq.wait_recheck (pg/settings.h: a stream
// dropped, or dropped and created again, wakes nobody).
constexpr int32 kMaxBatchEvents = 100000;

int64 MonotonicMicros() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// `traced` (next_batch_traced): then each event's traceparent and
// tracestate (ADR 0030).
void PutEvents(ReturnSetInfo* rsinfo, const store::streams::Batch& batch, bool traced) {
  for (const store::streams::Event& event : batch.events) {
    Datum values[6] = {Int64GetDatum(batch.batch_id), Int64GetDatum(event.id), event.payload,
                       TimestampTzGetDatum(event.appended_at)};
    bool nulls[6] = {false, false, false, false, true, true};
    if (traced) pg::TraceColumns(event.trace_context, values + 4, nulls + 4);
    pg::Guard([&] { tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls); });
  }
}

}  // namespace

}  // namespace pgq::api

using namespace pgq;

// register_consumer(stream, consumer) returns whether it is new
PGQ_FUNCTION(pgq_register_consumer) {
  const std::string_view name = pg::NameArg(fcinfo, 0, "stream");
  const std::string_view consumer = pg::NameArg(fcinfo, 1, "consumer");
  pg::SpiSession spi;
  const store::streams::Stream stream = service::FindStreamWithRight(spi, name, core::kConsume);
  PG_RETURN_BOOL(store::streams::Register(spi, stream, consumer, pg::MaxConsumersPerStream()));
}

// unregister_consumer(stream, consumer) returns whether it was registered
PGQ_FUNCTION(pgq_unregister_consumer) {
  const std::string_view name = pg::NameArg(fcinfo, 0, "stream");
  const std::string_view consumer = pg::NameArg(fcinfo, 1, "consumer");
  pg::SpiSession spi;
  const store::streams::Stream stream =
      service::FindStreamWithRight(spi, name, core::kConsume | core::kAdmin);
  PG_RETURN_BOOL(store::streams::Unregister(spi, stream, consumer));
}

namespace {

// next_batch(stream, consumer, max_events, wait) returns SETOF (batch_id,
// event_id, payload, appended_at): the open batch again, or a new one;
// `traced` (next_batch_traced): each event's traceparent and tracestate too.
Datum NextBatchInto(FunctionCallInfo fcinfo, bool traced) {
  const std::string_view name = pg::NameArg(fcinfo, 0, "stream");
  const std::string_view consumer = pg::NameArg(fcinfo, 1, "consumer");
  const int32 max_events = pg::RequiredInt32(fcinfo, 2, "max_events");
  if (max_events < 1 || max_events > api::kMaxBatchEvents) {
    pg::Raise(ERRCODE_INVALID_PARAMETER_VALUE,
              "max_events must be between 1 and " + std::to_string(api::kMaxBatchEvents),
              "max_events is " + std::to_string(max_events) + ".");
  }
  const int64 wait_us =
      pg::ArgIsNull(fcinfo, 3) ? 0 : pg::IntervalMicros(PG_GETARG_INTERVAL_P(3), "wait");
  if (wait_us < 0) pg::Raise(ERRCODE_INVALID_PARAMETER_VALUE, "wait must not be negative");
  if (wait_us > 0 && IsolationUsesXactSnapshot()) {
    pg::Raise(ERRCODE_FEATURE_NOT_SUPPORTED,
              "next_batch with wait requires the READ COMMITTED isolation level",
              "A transaction snapshot would never see events committed while waiting.");
  }
  (void)pg::AddMicros(GetCurrentTimestamp(), wait_us, "wait");  // 22008 beyond the range

  ReturnSetInfo* rsinfo = reinterpret_cast<ReturnSetInfo*>(fcinfo->resultinfo);
  pg::Guard([&] { InitMaterializedSRF(fcinfo, MAT_SRF_USE_EXPECTED_DESC); });
  MemoryContext memory = rsinfo->econtext->ecxt_per_query_memory;

  pg::SpiSession spi;
  // One attempt: the stream as committed now (resolved once per attempt: a
  // drop raises undefined_object, a revoke counts while waiting), then,
  // when waiting, the waiter armed on its current id before the batch's
  // snapshot (pg/channel_wait.h), then the batch.
  const auto attempt = [&](pg::ChannelWaiter* waiter) {
    const store::streams::Stream stream = service::FindStreamWithRight(spi, name, core::kConsume);
    if (waiter != nullptr) waiter->Arm(pg::Channel::Stream(stream.id));
    return store::streams::NextBatch(spi, stream, consumer, max_events, pg::MaxBatchBytes(),
                                     memory);
  };
  if (wait_us == 0) {
    api::PutEvents(rsinfo, attempt(nullptr), traced);
    return static_cast<Datum>(0);
  }
  const int64 wait_end = core::WaitEnd(api::MonotonicMicros(), wait_us);
  pg::ChannelWaiter waiter;
  for (;;) {
    // An attempt that finds nothing is rolled back: asleep, the reader holds
    // no lock on the consumer's row or the stream's tables (a truncation or
    // a drop need not wait for it).
    pg::SubTransaction sub;
    const store::streams::Batch batch = attempt(&waiter);
    if (batch.batch_id != 0) {
      sub.Commit();
      api::PutEvents(rsinfo, batch, traced);
      break;
    }
    sub.Rollback();
    const int64 left_ms = core::MillisLeft(wait_end, api::MonotonicMicros());
    if (left_ms == 0) break;
    waiter.Sleep(static_cast<long>(std::min<int64>(pg::WaitRecheckMillis(), left_ms)));
  }
  return static_cast<Datum>(0);
}

}  // namespace

PGQ_FUNCTION(pgq_next_batch) { return NextBatchInto(fcinfo, false); }

// next_batch_traced(stream, consumer, max_events, wait): next_batch's
// columns, then traceparent and tracestate.
PGQ_FUNCTION(pgq_next_batch_traced) { return NextBatchInto(fcinfo, true); }

// finish_batch(batch_id) returns the number of events it held
PGQ_FUNCTION(pgq_finish_batch) {
  const int64 batch_id = pg::RequiredInt64(fcinfo, 0, "batch_id");
  pg::SpiSession spi;
  service::RequireStreamRightSomewhere(spi, core::kConsume, "finish batches");
  // A batch of a stream the caller may not read is answered as one that
  // does not exist: batch ids reveal nothing of other streams (as job ids
  // of other queues, issue 15 L4).
  const int32 stream_id = store::streams::StreamOfBatch(spi, batch_id);
  if (stream_id == 0 || !service::HoldsStreamRight(spi, GetUserId(), stream_id, core::kConsume)) {
    pg::Raise(ERRCODE_INVALID_PARAMETER_VALUE,
              "batch " + std::to_string(batch_id) + " does not exist",
              "Batch ids are the batch_id column next_batch returned.");
  }
  PG_RETURN_INT32(store::streams::FinishBatch(spi, batch_id));
}

// stream_consumer_stats() returns one row per consumer of the streams the
// caller holds a right on
PGQ_FUNCTION(pgq_stream_consumer_stats) {
  ReturnSetInfo* rsinfo = reinterpret_cast<ReturnSetInfo*>(fcinfo->resultinfo);
  pg::Guard([&] { InitMaterializedSRF(fcinfo, MAT_SRF_USE_EXPECTED_DESC); });
  const TimestampTz now = GetCurrentTimestamp();
  pg::SpiSession spi;
  const Oid me = GetUserId();
  const std::vector<store::streams::ConsumerStats> stats =
      store::streams::Stats(spi, now, pg::MonitoringCountLimit(), [&](int32 stream_id) {
        return service::HoldsStreamRight(spi, me, stream_id, core::kAllRights);
      });
  for (const store::streams::ConsumerStats& row : stats) {
    Datum values[9];
    bool nulls[9] = {false, false, false, false, false, false, false, false, false};
    values[8] = BoolGetDatum(row.pending_capped);
    values[0] = pg::TextDatum(row.stream);
    values[1] = pg::TextDatum(row.consumer);
    values[2] = pg::Guard([&] { return IntervalPGetDatum(pg::MicrosInterval(row.lag_us)); });
    values[3] = Int64GetDatum(row.pending);
    values[4] = BoolGetDatum(row.batch_open);
    nulls[5] = !row.has_batch_age;
    values[5] =
        row.has_batch_age
            ? pg::Guard([&] { return IntervalPGetDatum(pg::MicrosInterval(row.batch_age_us)); })
            : static_cast<Datum>(0);
    values[6] = Int64GetDatum(row.finished_events);
    nulls[7] = !row.has_last_finished;
    values[7] = TimestampTzGetDatum(row.last_finished_at);
    pg::Guard([&] { tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls); });
  }
  return static_cast<Datum>(0);
}
