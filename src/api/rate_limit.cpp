#include "api/rate_limit.h"

namespace pgq::api {

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

int32 RateBucket::Take(int32 want, TimestampTz now) {
  if (slot_ != nullptr) return pg::TakeRateTokens(slot_, rate_, now, want);
  pg::Params params;
  params.Set(0, Int32GetDatum(queue_id_))
      .Set(1, Float8GetDatum(core::BucketBurst(rate_)))
      .Set(2, TimestampTzGetDatum(now));
  spi_.Execute(create_bucket, params);
  pg::Params key;
  key.Set(0, Int32GetDatum(queue_id_));
  const pg::Result bucket = spi_.Execute(lock_bucket, key);
  if (bucket.empty()) return 0;  // the queue is being dropped
  bool is_null = false;
  row_ = core::TokenBucket{bucket.Float8(0, 1), DatumGetTimestampTz(bucket.Value(0, 2, &is_null))};
  return core::TakeTokens(row_, rate_, now, want);
}

void RateBucket::Return(int32 unused) {
  if (slot_ != nullptr) {
    pg::ReturnRateTokens(slot_, rate_, unused);
    return;
  }
  core::ReturnTokens(row_, rate_, unused);
  pg::Params params;
  params.Set(0, Int32GetDatum(queue_id_))
      .Set(1, Float8GetDatum(row_.tokens))
      .Set(2, TimestampTzGetDatum(row_.updated_us));
  spi_.Execute(store_bucket, params);
}

int64 RateBucket::MicrosUntilToken() const {
  return slot_ != nullptr ? pg::MicrosUntilRateToken(slot_, rate_)
                          : core::MicrosUntilToken(row_, rate_);
}

}  // namespace pgq::api
