// Input rules of the SQL API that need no database. Pure C++.
#pragma once

#include <cstdint>
#include <string_view>

namespace pgq::core {

inline constexpr std::size_t kMaxQueueNameLength = 63;
inline constexpr int32_t kMinClaimBatch = 1;
inline constexpr int32_t kMaxClaimBatch = 10000;
// Jobs one enqueue may wait for (enqueue's after).
inline constexpr int kMaxParents = 10000;
// Queues one claim may take jobs from (pgq.claim(queues text[])).
inline constexpr int kMaxClaimQueues = 32;
inline constexpr int32_t kMaxAttemptsLimit = 1000000;
// A dedupe key lives in a btree index entry, so it must stay well below the
// index row limit (~2.7 kB); keys longer than this should be hashed.
inline constexpr std::size_t kMaxDedupeKeyBytes = 512;

// Names and keys of the coordination primitives (teams, members, subjects,
// switches, ladders, once keys): any text of 1 to this many bytes. They are
// btree keys, so the same bound as a dedupe key.
inline constexpr std::size_t kMaxKeyBytes = 512;

// The longest interval a queue setting (backoff_base, backoff_max,
// retention) or an @every schedule may be: 100 years, as PostgreSQL's
// interval comparison counts them (1200 months of 30 days). Every
// one is added to or subtracted from the current time by maintenance and the
// monitoring views, for every queue at once; a longer one could leave
// PostgreSQL's timestamp range and fail them for every queue of the database.
inline constexpr int64_t kMaxSettingIntervalMicros = 36000LL * 24 * 60 * 60 * 1000000;

// The longest cron spec or @every spec accepted, in bytes.
inline constexpr std::size_t kMaxScheduleSpecBytes = 200;

// The longest error text fail() keeps, in bytes; a longer one is cut at a
// character boundary and ends with kTruncatedMarker.
inline constexpr std::size_t kMaxErrorTextBytes = 8192;
inline constexpr std::string_view kTruncatedMarker = "... [truncated]";

// 1-63 characters of [a-z0-9_.-], starting with a letter or a digit.
bool IsValidQueueName(std::string_view name);

enum class LeaseCheck { kOk, kNotPositive, kTooLong };

// A lease must be > 0 and <= the configured maximum (both in microseconds).
LeaseCheck CheckLease(int64_t lease_us, int64_t max_lease_us);

inline bool IsValidClaimBatch(int32_t n) { return n >= kMinClaimBatch && n <= kMaxClaimBatch; }

inline bool IsValidMaxAttempts(int32_t n) { return n >= 1 && n <= kMaxAttemptsLimit; }

// A queue's max_running (jobs running at once): a capped claim counts the
// running jobs up to it, so it is bounded like a batch of work, not an int.
inline constexpr int32_t kMaxRunningLimit = 100000;
inline bool IsValidMaxRunning(int32_t n) { return n >= 1 && n <= kMaxRunningLimit; }
// A queue's group_concurrency (jobs of one FIFO group running at once).
inline constexpr int32_t kGroupConcurrencyLimit = 10000;
inline bool IsValidGroupConcurrency(int32_t n) { return n >= 1 && n <= kGroupConcurrencyLimit; }

inline bool IsValidDedupeKey(std::string_view key) {
  return !key.empty() && key.size() <= kMaxDedupeKeyBytes;
}

inline bool IsValidKey(std::string_view key) { return !key.empty() && key.size() <= kMaxKeyBytes; }

}  // namespace pgq::core
