// The statements on pgq.rate_buckets (store/rate_buckets.h).
#include "store/rate_buckets.h"

namespace pgq::store {

namespace {

// The first claim of a queue creates its row, full.
pg::Statement create_bucket = {
    "INSERT INTO pgq.rate_buckets (queue_id, tokens, updated_at) VALUES ($1, $2, $3) "
    "ON CONFLICT (queue_id) DO NOTHING",
    3,
    {INT4OID, FLOAT8OID, TIMESTAMPTZOID},
    nullptr};

pg::Statement lock_bucket = {
    "SELECT tokens, updated_at FROM pgq.rate_buckets WHERE queue_id = $1 FOR UPDATE",
    1,
    {INT4OID},
    nullptr};

pg::Statement store_bucket = {
    "UPDATE pgq.rate_buckets SET tokens = $2, updated_at = $3 WHERE queue_id = $1",
    3,
    {INT4OID, FLOAT8OID, TIMESTAMPTZOID},
    nullptr};

}  // namespace

std::optional<core::TokenBucket> LockRateBucket(pg::SpiSession& spi, int32 queue_id, double burst,
                                                TimestampTz now) {
  pg::Params params;
  params.Set(0, Int32GetDatum(queue_id))
      .Set(1, Float8GetDatum(burst))
      .Set(2, TimestampTzGetDatum(now));
  spi.Execute(create_bucket, params);
  pg::Params key;
  key.Set(0, Int32GetDatum(queue_id));
  const pg::Result bucket = spi.Execute(lock_bucket, key);
  if (bucket.empty()) return std::nullopt;
  bool is_null = false;
  return core::TokenBucket{bucket.Float8(0, "tokens"),
                           DatumGetTimestampTz(bucket.Value(0, "updated_at", &is_null))};
}

void StoreRateBucket(pg::SpiSession& spi, int32 queue_id, const core::TokenBucket& bucket) {
  pg::Params params;
  params.Set(0, Int32GetDatum(queue_id))
      .Set(1, Float8GetDatum(bucket.tokens))
      .Set(2, TimestampTzGetDatum(bucket.updated_us));
  spi.Execute(store_bucket, params);
}

}  // namespace pgq::store
