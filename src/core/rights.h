// Who may do what to a queue: the rule, as a pure function. Pure C++.
//
// A right is held through a grant (pgq.grant(role, queue, privilege), queue
// NULL = every queue, present and future) or by owning the queue, which
// holds all three. A grant to a role counts for every role that has its
// privileges (PostgreSQL's role membership with INHERIT); whether one role
// has another's privileges is the caller's question to answer
// (has_privs_of_role), passed in as `has_privs_of`.
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string_view>

namespace pgq::core {

// Bits of a rights mask.
enum Right : uint8_t {
  kProduce = 1,  // enqueue, enqueue_many, publish into it, cancel
  kConsume = 2,  // claim, complete, fail, extend, release
  kAdmin = 4,    // alter, pause, resume, drop, retry_dead, cancel, schedules, subscriptions
};
inline constexpr uint8_t kAllRights = kProduce | kConsume | kAdmin;

// queue_id 0: every queue (queue ids start at 1).
inline constexpr int32_t kEveryQueue = 0;

// One row of who holds what: a grant, or a queue's owner (all rights).
struct RightsHolder {
  uint32_t role;  // a role's OID
  int32_t queue_id;
  uint8_t rights;

  bool operator<(const RightsHolder& other) const { return queue_id < other.queue_id; }
};

// 'produce', 'consume' or 'admin' (any case, as has_table_privilege takes
// privilege names) -> its bit; nullopt for anything else.
std::optional<uint8_t> ParseRight(std::string_view word);

// A comma-separated list of rights ('produce, consume'), as
// has_table_privilege takes one: their mask, or nullopt if a word is not a
// right or the list is empty.
std::optional<uint8_t> ParseRights(std::string_view list);

// The name of a single right bit ("produce", ...); "" for anything else.
std::string_view RightName(uint8_t right);

// True if `role` holds at least one of `wanted` on queue `queue_id`
// (kEveryQueue: on every queue, which only grants for every queue give).
// `holders` (any container of RightsHolder) is sorted by queue_id.
template <typename Holders, typename HasPrivsOf>
bool HoldsRight(const Holders& holders, uint32_t role, int32_t queue_id, uint8_t wanted,
                HasPrivsOf&& has_privs_of) {
  for (const int32_t scope : {kEveryQueue, queue_id}) {
    RightsHolder key{0, scope, 0};
    for (auto it = std::lower_bound(holders.begin(), holders.end(), key);
         it != holders.end() && it->queue_id == scope; ++it) {
      if ((it->rights & wanted) != 0 && has_privs_of(role, it->role)) return true;
    }
    if (queue_id == kEveryQueue) break;
  }
  return false;
}

// True if `role` holds at least one of `wanted` on some queue.
template <typename Holders, typename HasPrivsOf>
bool HoldsRightAnywhere(const Holders& holders, uint32_t role, uint8_t wanted,
                        HasPrivsOf&& has_privs_of) {
  for (const RightsHolder& holder : holders) {
    if ((holder.rights & wanted) != 0 && has_privs_of(role, holder.role)) return true;
  }
  return false;
}

}  // namespace pgq::core
