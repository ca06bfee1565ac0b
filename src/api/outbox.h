// The outbox's maintenance side, shared by pgq.maintain() and the worker.
#pragma once

#include "pg/spi.h"

namespace pgq::api {

// Drops up to `limit` events older than the longest retention of any queue;
// returns how many.
int64 DropOldEvents(pg::SpiSession& spi, TimestampTz now, int32 limit);

}  // namespace pgq::api
