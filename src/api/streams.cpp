// pgq.create_stream, alter_stream, drop_stream, append, append_many,
// grant_stream, revoke_stream (SPEC §10): arguments and rights; the
// statements are the streams store's (store/streams.h).
#include "service/rights.h"
#include "service/stream_rights.h"
#include "core/validate.h"
#include "pg/trace_context.h"
#include "pg/args.h"
#include "pg/invalidation.h"
#include "pg/settings.h"

extern "C" {
#include "utils/acl.h"
#include "utils/syscache.h"
}

namespace pgq::api {

namespace {

// A ring turns at most this often: a stream's three segments each hold at
// least this long of events.
constexpr int64 kMinRotationUs = USECS_PER_SEC;

Interval RotationArg(FunctionCallInfo fcinfo, int index) {
  if (pg::ArgIsNull(fcinfo, index)) {
    pg::Raise(ERRCODE_NULL_VALUE_NOT_ALLOWED, "rotation must not be null");
  }
  const Interval* rotation = PG_GETARG_INTERVAL_P(index);
  const int64 micros = pg::SpanMicros(rotation, "rotation");
  if (micros < kMinRotationUs) {
    pg::Raise(ERRCODE_INVALID_PARAMETER_VALUE, "rotation must be at least 1 second",
              "A stream's ring turns once per rotation; each of its three segments holds that "
              "long of events.");
  }
  return *rotation;
}

Datum ChangeStreamGrant(FunctionCallInfo fcinfo, bool give) {
  const Oid role = pg::RoleArg(fcinfo, 0);
  const bool every_stream = pg::ArgIsNull(fcinfo, 1);
  const std::string_view stream =
      every_stream ? std::string_view() : pg::NameArg(fcinfo, 1, "stream");
  const std::string_view word = pg::RequiredText(fcinfo, 2, "privilege");
  const std::optional<uint8> right = core::ParseRight(word);
  if (!right) {
    pg::Raise(ERRCODE_INVALID_PARAMETER_VALUE,
              "unrecognized privilege type \"" + std::string(word) + "\"", {},
              "Use produce, consume or admin.");
  }
  const char* verb = give ? "grant" : "revoke";
  const Oid me = GetUserId();
  const bool superuser = service::IsSuperuser(me);
  pg::SpiSession spi;
  int32 stream_id = core::kEveryQueue;
  if (every_stream) {
    if (!superuser) {
      pg::Raise(ERRCODE_INSUFFICIENT_PRIVILEGE,
                std::string("permission denied to ") + verb + " rights on every stream",
                "Only a superuser may.",
                "A stream's owner can " + std::string(verb) + " rights on that stream: name it.");
    }
  } else {
    // The stream row stays locked until commit: it cannot be dropped
    // between the check of its owner and the grant's insert.
    const std::optional<store::streams::StreamOwner> found = store::streams::LockOwner(spi, stream);
    if (!found) {
      (void)service::FindStream(spi, stream);  // raises undefined_object
      pg::Raise(ERRCODE_INTERNAL_ERROR, "stream \"" + std::string(stream) + "\" vanished");
    }
    stream_id = found->id;
    const Oid owner = found->owner;
    const std::string& owner_name = found->owner_name;
    // A dropped owner (its OID names no role) leaves the stream to superusers.
    const bool owner_exists =
        pg::Guard([owner] { return SearchSysCacheExists1(AUTHOID, ObjectIdGetDatum(owner)); });
    if (!superuser && !(owner_exists && service::HasPrivsOf(me, owner))) {
      pg::Raise(ERRCODE_INSUFFICIENT_PRIVILEGE,
                std::string("permission denied to ") + verb + " rights on stream \"" +
                    std::string(stream) + "\"",
                "Only its owner (role \"" + owner_name + "\") or a superuser may.");
    }
  }
  const std::string_view privilege = core::RightName(*right);
  const bool changed = give ? store::streams::InsertGrant(spi, role, stream_id, privilege)
                            : store::streams::DeleteGrant(spi, role, stream_id, privilege);
  if (changed) pg::invalidation::Announce(pg::invalidation::kStreamGrants);
  PG_RETURN_BOOL(changed);
}

}  // namespace

}  // namespace pgq::api

using namespace pgq;

// create_stream(stream, rotation, if_not_exists)
PGQ_FUNCTION(pgq_create_stream) {
  const std::string_view name = pg::NameArg(fcinfo, 0, "stream");
  const Interval rotation = api::RotationArg(fcinfo, 1);
  const bool if_not_exists = !pg::ArgIsNull(fcinfo, 2) && PG_GETARG_BOOL(2);
  pg::SpiSession spi;
  service::RequireStreamRightOnEvery(spi, core::kAdmin, "create streams");
  if (!store::streams::Create(spi, name, GetUserId(), rotation, pg::Now())) {
    if (if_not_exists) return static_cast<Datum>(0);
    pg::Raise(ERRCODE_DUPLICATE_OBJECT, "stream \"" + std::string(name) + "\" already exists", {},
              "Use if_not_exists => true to ignore an existing stream.");
  }
  return static_cast<Datum>(0);
}

// alter_stream(stream, rotation)
PGQ_FUNCTION(pgq_alter_stream) {
  const std::string_view name = pg::NameArg(fcinfo, 0, "stream");
  const Interval rotation = api::RotationArg(fcinfo, 1);
  pg::SpiSession spi;
  const store::streams::Stream stream = service::FindStreamWithRight(spi, name, core::kAdmin);
  store::streams::SetRotation(spi, stream.id, rotation);
  return static_cast<Datum>(0);
}

// drop_stream(stream, if_exists) returns whether it existed
PGQ_FUNCTION(pgq_drop_stream) {
  const std::string_view name = pg::NameArg(fcinfo, 0, "stream");
  const bool if_exists = !pg::ArgIsNull(fcinfo, 1) && PG_GETARG_BOOL(1);
  pg::SpiSession spi;
  std::optional<store::streams::Stream> stream = store::streams::Find(spi, name);
  if (!stream) {
    if (if_exists) PG_RETURN_BOOL(false);
    (void)service::FindStream(spi, name);  // raises undefined_object
  }
  service::RequireStreamRight(spi, *stream, core::kAdmin);
  store::streams::Drop(spi, *stream, pg::Now());
  PG_RETURN_BOOL(true);
}

// append(stream, payload, traceparent, tracestate) returns the event's id
PGQ_FUNCTION(pgq_append) {
  const std::string_view name = pg::NameArg(fcinfo, 0, "stream");
  const Datum payload = pg::RequiredPayload(fcinfo, 1);
  const Datum trace_context = pg::TraceContextArg(fcinfo, 2);
  pg::SpiSession spi;
  const store::streams::Stream stream = service::FindStreamWithRight(spi, name, core::kProduce);
  int64 id = 0;
  store::streams::Append(spi, stream, &payload, 1, &id, false, trace_context);
  PG_RETURN_INT64(id);
}

// append_many(stream, payloads, traceparent, tracestate) returns the
// events' ids in input order
PGQ_FUNCTION(pgq_append_many) {
  const std::string_view name = pg::NameArg(fcinfo, 0, "stream");
  const pg::PayloadArray payloads = pg::PayloadsArg(fcinfo, 1);
  const Datum trace_context = pg::TraceContextArg(fcinfo, 2);
  const int count = payloads.count;
  ReturnSetInfo* rsinfo = reinterpret_cast<ReturnSetInfo*>(fcinfo->resultinfo);
  pg::Guard([&] { InitMaterializedSRF(fcinfo, MAT_SRF_USE_EXPECTED_DESC); });
  std::vector<int64> ids(static_cast<size_t>(count));
  {
    pg::SpiSession spi;
    const store::streams::Stream stream = service::FindStreamWithRight(spi, name, core::kProduce);
    if (count == 0) return static_cast<Datum>(0);
    store::streams::Append(spi, stream, payloads.elements, count, ids.data(), false, trace_context);
  }
  for (const int64 id : ids) {
    Datum value = Int64GetDatum(id);
    bool is_null = false;
    pg::Guard([&] { tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, &value, &is_null); });
  }
  return static_cast<Datum>(0);
}

// grant_stream(role, stream, privilege) returns whether role did not hold it yet
PGQ_FUNCTION(pgq_grant_stream) { return api::ChangeStreamGrant(fcinfo, true); }

// revoke_stream(role, stream, privilege) returns whether there was such a grant
PGQ_FUNCTION(pgq_revoke_stream) { return api::ChangeStreamGrant(fcinfo, false); }
