// pgq.create_queue, alter_queue, drop_queue, pause, resume.
#include <optional>

#include "service/handlers.h"
#include "service/queue_ref.h"
#include "service/rights.h"
#include "core/fair_order.h"
#include "core/rate_limit.h"
#include "core/validate.h"
#include "pg/ledger.h"
#include "pg/args.h"
#include "pg/invalidation.h"
#include "pg/queue_lock.h"
#include "pg/settings.h"
#include "pg/shared.h"
#include "store/jobs.h"
#include "store/queues.h"

extern "C" {
#include "utils/acl.h"
}

namespace pgq::api {

namespace {

// The settings of a queue, as validated C++ values.
using QueueSettings = store::QueueSettings;

void Validate(const QueueSettings& s) {
  if (!core::IsValidMaxAttempts(s.max_attempts)) {
    pg::Raise(ERRCODE_INVALID_PARAMETER_VALUE,
              "max_attempts must be between 1 and " + std::to_string(core::kMaxAttemptsLimit));
  }
  pg::CheckLeaseValue(pg::IntervalMicros(s.lease, "lease"), "lease");
  const int64 base = pg::IntervalMicros(s.backoff_base, "backoff_base");
  const int64 cap = pg::IntervalMicros(s.backoff_max, "backoff_max");
  if (base < 0) pg::Raise(ERRCODE_INVALID_PARAMETER_VALUE, "backoff_base must not be negative");
  if (cap < base) {
    pg::Raise(ERRCODE_INVALID_PARAMETER_VALUE, "backoff_max must not be less than backoff_base");
  }
  const int64 retention = pg::IntervalMicros(s.retention, "retention");
  if (retention < 0) pg::Raise(ERRCODE_INVALID_PARAMETER_VALUE, "retention must not be negative");
  for (const auto& [what, micros] :
       {std::pair{"backoff_max", cap}, std::pair{"retention", retention}}) {
    if (micros > core::kMaxSettingIntervalMicros) {
      pg::Raise(ERRCODE_INVALID_PARAMETER_VALUE, std::string(what) + " must be at most 100 years");
    }
  }
}

// A rate_limit argument that is not NULL: a number of claims per second,
// finite and > 0; alter_queue also takes 0, which removes the limit.
double RateLimitArg(FunctionCallInfo fcinfo, int index, bool zero_removes,
                    const std::string& what = "rate_limit") {
  const double rate = PG_GETARG_FLOAT4(index);
  if (zero_removes && rate == 0) return 0;
  if (!core::IsValidRateLimit(rate)) {
    pg::Raise(ERRCODE_INVALID_PARAMETER_VALUE,
              what + " must be a finite number of claims per second greater than 0",
              "It is " + std::to_string(rate) + ".",
              zero_removes ? "Use " + what + " => 0 to remove the limit."
                           : std::string("Leave it NULL for no limit."));
  }
  return rate;
}

// The handler argument: std::nullopt when NULL (none / unchanged), "" for
// 0::regprocedure (alter_queue: remove the handler), else its checked
// signature.
std::optional<std::string> HandlerArg(FunctionCallInfo fcinfo, int index, Oid owner) {
  if (pg::ArgIsNull(fcinfo, index)) return std::nullopt;
  const Oid handler = PG_GETARG_OID(index);
  if (!OidIsValid(handler)) return std::string();
  return service::CheckHandler(handler, owner);
}

Interval* IntervalArg(FunctionCallInfo fcinfo, int index, const char* what) {
  if (pg::ArgIsNull(fcinfo, index)) {
    pg::Raise(ERRCODE_NULL_VALUE_NOT_ALLOWED, std::string(what) + " must not be null");
  }
  return PG_GETARG_INTERVAL_P(index);
}

// Arguments `first` (keep_completed) and `first` + 1 (keep_dead):
// validated, then stored.
void StoreKeep(pg::SpiSession& spi, FunctionCallInfo fcinfo, int first, std::string_view name) {
  const bool has_completed = !pg::ArgIsNull(fcinfo, first);
  const bool has_dead = !pg::ArgIsNull(fcinfo, first + 1);
  if (has_completed) pg::SpanMicros(PG_GETARG_INTERVAL_P(first), "keep_completed");
  if (has_dead) pg::SpanMicros(PG_GETARG_INTERVAL_P(first + 1), "keep_dead");
  if (!has_completed && !has_dead) return;
  store::StoreKeep(spi, name, has_completed ? PG_GETARG_DATUM(first) : 0,
                   has_dead ? PG_GETARG_DATUM(first + 1) : 0);
}

// Arguments `first` (max_running) and `first` + 1 (group_concurrency),
// validated. With `zero_removes`
// (alter_queue) max_running => 0 removes the cap, and NULL leaves either
// unchanged.
struct CapsArgs {
  bool given;  // the function has the arguments
  bool has_max, has_group;
  Datum max_running, group_concurrency;
};

CapsArgs ReadCaps(FunctionCallInfo fcinfo, int first, bool zero_removes) {
  const CapsArgs caps{true, !pg::ArgIsNull(fcinfo, first), !pg::ArgIsNull(fcinfo, first + 1),
                      PG_GETARG_DATUM(first), PG_GETARG_DATUM(first + 1)};
  if (caps.has_max) {
    const int32 max_running = DatumGetInt32(caps.max_running);
    if (!(zero_removes && max_running == 0) && !core::IsValidMaxRunning(max_running)) {
      pg::Raise(
          ERRCODE_INVALID_PARAMETER_VALUE,
          "max_running must be between 1 and " + std::to_string(core::kMaxRunningLimit),
          "It is " + std::to_string(max_running) + ".",
          zero_removes ? "Use max_running => 0 to remove the cap." : "Leave it NULL for no cap.");
    }
  }
  if (caps.has_group) {
    const int32 group_concurrency = DatumGetInt32(caps.group_concurrency);
    if (!core::IsValidGroupConcurrency(group_concurrency)) {
      pg::Raise(
          ERRCODE_INVALID_PARAMETER_VALUE,
          "group_concurrency must be between 1 and " + std::to_string(core::kGroupConcurrencyLimit),
          "It is " + std::to_string(group_concurrency) + ".",
          "1 runs the jobs of a group one at a time, in enqueue order.");
    }
  } else if (!zero_removes) {
    pg::Raise(ERRCODE_NULL_VALUE_NOT_ALLOWED, "group_concurrency must not be null");
  }
  return caps;
}

// The fairness argument `arg` (ADR 0029): "group"; "" for none ('none',
// or NULL where NULL means none); nullopt: NULL where it means unchanged.
std::optional<std::string> FairnessArg(FunctionCallInfo fcinfo, int arg, bool null_keeps) {
  if (pg::ArgIsNull(fcinfo, arg)) {
    if (null_keeps) return std::nullopt;
    return std::string();
  }
  const std::string_view value = pg::RequiredText(fcinfo, arg, "fairness");
  if (value == "group") return std::string(value);
  if (value == "none") return std::string();
  pg::Raise(ERRCODE_INVALID_PARAMETER_VALUE, "fairness must be 'group' or 'none'",
            "It is '" + std::string(value.substr(0, 64)) + "'.",
            "'group' hands out a queue's ready jobs across their group keys in turn.");
}

// The max_pending argument `arg` (ADR 0029): a count of jobs, 0 for none
// (0 given where `zero_removes`, or NULL where NULL means none); nullopt:
// NULL where it means unchanged. A limit needs the library preloaded: its
// count lives in shared memory.
std::optional<int32> MaxPendingArg(FunctionCallInfo fcinfo, int arg, bool zero_removes) {
  if (pg::ArgIsNull(fcinfo, arg)) {
    if (zero_removes) return std::nullopt;
    return 0;
  }
  const int32 limit = PG_GETARG_INT32(arg);
  if (limit < 0 || (limit == 0 && !zero_removes)) {
    pg::Raise(
        ERRCODE_INVALID_PARAMETER_VALUE,
        std::string("max_pending must be at least 1") + (zero_removes ? ", or 0 to remove it" : ""),
        "It is " + std::to_string(limit) + ".");
  }
  if (limit > 0 && pg::Shared() == nullptr) {
    pg::Raise(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
              "max_pending needs pgq_cpp in shared_preload_libraries",
              "The count of a queue's unfinished jobs that it limits is kept in shared memory.",
              "Add pgq_cpp to shared_preload_libraries and restart the server.");
  }
  return limit;
}

void StoreCaps(pg::SpiSession& spi, const CapsArgs& caps, std::string_view name) {
  if (!caps.has_max && !caps.has_group) return;
  store::StoreCaps(spi, name, caps.has_max, caps.max_running, caps.has_group,
                   caps.group_concurrency);
}

Datum SetPaused(FunctionCallInfo fcinfo, bool paused) {
  const std::string_view name = pg::QueueNameArg(fcinfo, 0);
  pg::SpiSession spi;
  const std::optional<int32> queue_id = store::SetPaused(spi, name, paused);
  if (!queue_id) service::RaiseUnknownQueue(name);
  service::RequireRight(spi, *queue_id, name, core::kAdmin);  // else rolled back
  pg::invalidation::Announce(pg::invalidation::kQueues);      // claims read `paused` from the cache
  if (!paused) pg::ledger::NoteReady(*queue_id);              // waiting claims look again
  return BoolGetDatum(paused);
}

}  // namespace

}  // namespace pgq::api

using namespace pgq;

// create_queue(queue, max_attempts, lease, backoff_base, backoff_max,
//              retention, notify, rate_limit, handler, if_not_exists,
//              keep_completed, keep_dead, max_running, group_concurrency,
//              fairness, rate_limit_per_key, max_pending)
PGQ_FUNCTION(pgq_create_queue) {
  const std::string_view name = pg::QueueNameArg(fcinfo, 0);
  api::QueueSettings settings{pg::RequiredInt32(fcinfo, 1, "max_attempts"),
                              api::IntervalArg(fcinfo, 2, "lease"),
                              api::IntervalArg(fcinfo, 3, "backoff_base"),
                              api::IntervalArg(fcinfo, 4, "backoff_max"),
                              api::IntervalArg(fcinfo, 5, "retention"),
                              pg::RequiredBool(fcinfo, 6, "notify"),
                              pg::ArgIsNull(fcinfo, 7) ? 0.0 : api::RateLimitArg(fcinfo, 7, false)};
  const bool if_not_exists = !pg::ArgIsNull(fcinfo, 9) && PG_GETARG_BOOL(9);
  api::Validate(settings);
  const api::CapsArgs caps = api::ReadCaps(fcinfo, 12, false);
  const std::string fairness = *api::FairnessArg(fcinfo, 14, false);
  const double key_rate =
      pg::ArgIsNull(fcinfo, 15) ? 0.0 : api::RateLimitArg(fcinfo, 15, false, "rate_limit_per_key");
  const int32 max_pending = *api::MaxPendingArg(fcinfo, 16, false);
  pg::SpiSession spi;
  service::RequireRightOnEveryQueue(spi, core::kAdmin, "create queues");
  // The creating role owns the queue; its handler runs as that role.
  const Oid owner = GetUserId();
  const std::string handler = api::HandlerArg(fcinfo, 8, owner).value_or(std::string());
  const Datum owner_name = pg::Guard([owner] {
    return DirectFunctionCall1(namein, CStringGetDatum(GetUserNameFromId(owner, false)));
  });
  const uint64 created = store::InsertQueue(spi, name, settings, handler, owner_name) ? 1 : 0;
  if (created == 1) {
    api::StoreKeep(spi, fcinfo, 10, name);
    api::StoreCaps(spi, caps, name);
    if (!fairness.empty()) store::StoreFairness(spi, name, fairness);
    if (key_rate > 0) store::StoreKeyRate(spi, name, key_rate);
    if (max_pending > 0) store::StoreMaxPending(spi, name, max_pending);
    // Its ring (ADR 0028): its ready jobs' entries. Made without the
    // library preloaded too (the jobs then go to pgq.job_rows until it is).
    store::GiveQueueRing(spi, name, pg::Now());
  }
  // Its owner holds every right on it (service/rights.h): lists reload.
  if (created == 1) pg::invalidation::Announce(pg::invalidation::kQueues);
  if (created == 0) {
    if (!if_not_exists) {
      pg::Raise(ERRCODE_DUPLICATE_OBJECT, "queue \"" + std::string(name) + "\" already exists", {},
                "Use if_not_exists => true to skip existing queues, or pgq.alter_queue.");
    }
    const std::string message = "queue \"" + std::string(name) + "\" already exists, skipping";
    pg::Guard([&] {
      ereport(NOTICE, (errcode(ERRCODE_DUPLICATE_OBJECT), errmsg_internal("%s", message.c_str())));
    });
  }
  PG_RETURN_VOID();
}

// alter_queue(queue, max_attempts, lease, backoff_base, backoff_max,
//             retention, notify, rate_limit, handler, keep_completed,
//             keep_dead, max_running, group_concurrency, fairness,
//             rate_limit_per_key, max_pending): NULL = unchanged.
PGQ_FUNCTION(pgq_alter_queue) {
  const std::string_view name = pg::QueueNameArg(fcinfo, 0);
  const bool new_rate = !pg::ArgIsNull(fcinfo, 7);
  const double rate = new_rate ? api::RateLimitArg(fcinfo, 7, true) : 0.0;
  const api::CapsArgs caps = api::ReadCaps(fcinfo, 11, true);
  const std::optional<std::string> fairness = api::FairnessArg(fcinfo, 13, true);
  const bool new_key_rate = !pg::ArgIsNull(fcinfo, 14);
  const double key_rate =
      new_key_rate ? api::RateLimitArg(fcinfo, 14, true, "rate_limit_per_key") : 0.0;
  const std::optional<int32> max_pending = api::MaxPendingArg(fcinfo, 15, true);

  pg::SpiSession spi;
  // A locked read-modify-write: the row lock makes concurrent alters queue up,
  // so cross-field rules (backoff_max >= backoff_base) hold on what is stored.
  const std::optional<store::LockedQueue> stored = store::LockQueueRow(spi, name);
  if (!stored) service::RaiseUnknownQueue(name);
  service::RequireRight(spi, stored->id, name, core::kAdmin);
  const store::QueueSettings& old = stored->settings;
  auto pick_interval = [&](int arg, Interval* stored_interval) {
    return pg::ArgIsNull(fcinfo, arg) ? stored_interval : PG_GETARG_INTERVAL_P(arg);
  };
  api::QueueSettings settings{pg::ArgIsNull(fcinfo, 1) ? old.max_attempts : PG_GETARG_INT32(1),
                              pick_interval(2, old.lease),
                              pick_interval(3, old.backoff_base),
                              pick_interval(4, old.backoff_max),
                              pick_interval(5, old.retention),
                              pg::ArgIsNull(fcinfo, 6) ? old.notify : PG_GETARG_BOOL(6),
                              new_rate ? rate : old.rate_limit};
  api::Validate(settings);
  // A new handler is checked against the queue's owner.
  std::string handler = stored->handler;
  if (!pg::ArgIsNull(fcinfo, 8)) {
    const Oid owner = service::OwnerRole(stored->owner, name);
    // The handler runs as the owner: choosing it is the owner's to do, not
    // an admin's, who could otherwise run any function the owner may.
    const Oid me = GetUserId();
    if (!pg::Guard([&] { return has_privs_of_role(me, owner); })) {
      pg::Raise(ERRCODE_INSUFFICIENT_PRIVILEGE,
                "permission denied to set the handler of queue \"" + std::string(name) + "\"",
                "The handler runs as the queue's owner (role \"" + stored->owner +
                    "\"); only that role, its members and superusers may choose it.");
    }
    handler = api::HandlerArg(fcinfo, 8, owner).value_or(std::string());
  }
  store::UpdateQueue(spi, name, settings, handler);
  api::StoreKeep(spi, fcinfo, 9, name);
  api::StoreCaps(spi, caps, name);
  if (fairness) store::StoreFairness(spi, name, *fairness);
  if (new_key_rate) store::StoreKeyRate(spi, name, key_rate);
  if (max_pending) {
    store::StoreMaxPending(spi, name, *max_pending);
    pg::ledger::NoteRoomChanged(stored->id);  // its waiters read the new limit
  }
  pg::invalidation::Announce(pg::invalidation::kQueues);
  PG_RETURN_VOID();
}

// drop_queue(queue, force): refuses while the queue holds jobs (pending,
// running or dead) unless force.
PGQ_FUNCTION(pgq_drop_queue) {
  const std::string_view name = pg::QueueNameArg(fcinfo, 0);
  const bool force = !pg::ArgIsNull(fcinfo, 1) && PG_GETARG_BOOL(1);

  pg::SpiSession spi;
  const service::QueueRef queue = service::FindQueueWithRight(spi, name, core::kAdmin);
  // Wait for transactions that are adding jobs to this queue, and keep new
  // ones out until we commit (they then find the queue gone).
  pg::LockQueueExclusive(queue.id);

  const Datum name_datum = pg::TextDatum(name);
  if (!force) {
    const int64 held = store::CountQueueJobs(spi, queue.id, name_datum);
    if (held > 0) {
      pg::Raise(ERRCODE_OBJECT_IN_USE,
                "queue \"" + std::string(name) + "\" still holds " + std::to_string(held) + " jobs",
                "Pending, running and dead jobs all count.",
                "Use pgq.drop_queue('" + std::string(name) + "', force => true) to drop them too.");
    }
  }
  const TimestampTz now = pg::Now();
  store::PurgeQueueJobs(spi, queue.id, name_datum, now);
  store::ForgetFinished(spi, queue.id);
  store::DeleteQueue(spi, queue.id, now);
  pg::invalidation::Announce(pg::invalidation::kQueues);
  PG_RETURN_VOID();
}

// set_group_weight(queue, group_key, weight): admin right. A weight of 1
// (or NULL) is the default: the key's row goes.
PGQ_FUNCTION(pgq_set_group_weight) {
  const std::string_view name = pg::QueueNameArg(fcinfo, 0);
  const std::string_view key = pg::RequiredText(fcinfo, 1, "group_key");
  if (key.empty() || key.size() > core::kMaxKeyBytes) {
    pg::Raise(ERRCODE_INVALID_PARAMETER_VALUE,
              "group_key must be 1 to " + std::to_string(core::kMaxKeyBytes) + " bytes",
              "It is " + std::to_string(key.size()) + " bytes.");
  }
  const int32 weight = pg::ArgIsNull(fcinfo, 2) ? 1 : PG_GETARG_INT32(2);
  if (weight < 1 || weight > static_cast<int32>(core::kMaxFairWeight)) {
    pg::Raise(ERRCODE_INVALID_PARAMETER_VALUE,
              "weight must be between 1 and " + std::to_string(core::kMaxFairWeight),
              "It is " + std::to_string(weight) + ".",
              "A key of weight w gets w turns for each turn of a key of weight 1.");
  }
  pg::SpiSession spi;
  const service::QueueRef queue = service::FindQueueWithRight(spi, name, core::kAdmin);
  store::SetGroupWeight(spi, queue.id, PG_GETARG_DATUM(1), weight);
  // The lanes read weights with the queue's rings (store/ring_jobs.cpp).
  pg::invalidation::Announce(pg::invalidation::kQueues);
  PG_RETURN_VOID();
}

PGQ_FUNCTION(pgq_pause) { return api::SetPaused(fcinfo, true); }

PGQ_FUNCTION(pgq_resume) { return api::SetPaused(fcinfo, false); }
