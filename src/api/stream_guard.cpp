// pgq.acquire_consumer, release_consumer (issue 30 R1): the single-active
// guard pgq-relay --stream takes on its (stream, consumer) before it reads.
// Taking it needs the consume right on the stream, as reading does; the
// guard itself is a session lock no SQL call can name (pg/consumer_guard.h).
#include "service/stream_rights.h"
#include "pg/args.h"
#include "pg/consumer_guard.h"

using namespace pgq;

namespace {

// The stream and consumer ids of the arguments, once the caller's consume
// right on the stream is checked (42501 first, so a role with no right
// learns nothing of the stream's consumers).
std::pair<int32, int32> GuardedConsumer(FunctionCallInfo fcinfo, pg::SpiSession& spi) {
  const std::string_view name = pg::NameArg(fcinfo, 0, "stream");
  const std::string_view consumer = pg::NameArg(fcinfo, 1, "consumer");
  const store::streams::Stream stream = service::FindStreamWithRight(spi, name, core::kConsume);
  return {stream.id, store::streams::ConsumerId(spi, stream, consumer)};
}

}  // namespace

// acquire_consumer(stream, consumer) returns whether this session holds the
// consumer's guard now
PGQ_FUNCTION(pgq_acquire_consumer) {
  pg::SpiSession spi;
  const auto [stream_id, consumer_id] = GuardedConsumer(fcinfo, spi);
  PG_RETURN_BOOL(pg::TakeConsumerGuard(stream_id, consumer_id));
}

// release_consumer(stream, consumer) returns whether this session held it
PGQ_FUNCTION(pgq_release_consumer) {
  pg::SpiSession spi;
  const auto [stream_id, consumer_id] = GuardedConsumer(fcinfo, spi);
  PG_RETURN_BOOL(pg::ReleaseConsumerGuard(stream_id, consumer_id));
}
