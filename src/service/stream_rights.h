// Who may do what to a stream (SPEC §10, ADR 0020): produce (append),
// consume (register, read and finish batches), admin (alter, drop, unregister
// any consumer). A stream's owner holds all three; pgq.grant_stream gives
// them to other roles, for one stream or (a superuser's grant) for every
// stream. Checked inside every stream function before its statements run as
// the owner of pgq's tables, as for queues (service/rights.h).
#pragma once

#include "core/rights.h"
#include "pg/spi.h"
#include "store/streams.h"

namespace pgq::service {

// True if `role` holds at least one of `wanted` on stream `stream_id`
// (core::kEveryQueue: on every stream).
bool HoldsStreamRight(pg::SpiSession& spi, Oid role, int32 stream_id, uint8 wanted);

// Raises insufficient_privilege unless the current user holds one of
// `wanted` on the stream.
void RequireStreamRight(pg::SpiSession& spi, const store::streams::Stream& stream, uint8 wanted);

// Raises insufficient_privilege unless the current user holds one of
// `wanted` on some stream: what finish_batch checks before it looks at the
// batch, so a role with no stream learns nothing from batch ids.
void RequireStreamRightSomewhere(pg::SpiSession& spi, uint8 wanted, std::string_view action);

// Raises insufficient_privilege unless the current user holds `wanted` on
// every stream; `action` completes "permission denied to ...".
void RequireStreamRightOnEvery(pg::SpiSession& spi, uint8 wanted, std::string_view action);

// The stream named `name`, or undefined_object with a hint.
store::streams::Stream FindStream(pg::SpiSession& spi, std::string_view name);

// The same, then insufficient_privilege unless the current user holds at
// least one of `wanted` on it: what a function that takes a stream's name
// does first. Inline: append and next_batch call it once per call, as
// they called the two before.
inline store::streams::Stream FindStreamWithRight(pg::SpiSession& spi, std::string_view name,
                                                  uint8 wanted) {
  store::streams::Stream stream = FindStream(spi, name);
  RequireStreamRight(spi, stream, wanted);
  return stream;
}

}  // namespace pgq::service
