#include "service/rights.h"

#include <vector>

#include <boost/container/vector.hpp>

#include "store/grants.h"
#include "pg/allocator.h"
#include "pg/invalidation.h"

extern "C" {
#include "catalog/namespace.h"
#include "utils/acl.h"
#include "utils/lsyscache.h"
}

namespace pgq::service {

namespace {

using HolderList =
    boost::container::vector<core::RightsHolder, pg::ContextAllocator<core::RightsHolder>>;

// INVARIANT: sorted by queue_id; valid while `loaded` is. Built from the
// grants, the queues' owners and the roles (superuser, memberships).
HolderList* holders = nullptr;
pg::CacheEpoch loaded{pg::invalidation::kQueueGrants | pg::invalidation::kQueues |
                      pg::invalidation::kRoles};
MemoryContext rights_context = nullptr;  // holds `holders` and the scope below

const HolderList& Holders(pg::SpiSession& spi) {
  if (loaded.Valid()) return *holders;
  if (holders == nullptr) {
    MemoryContext context = pg::Guard(
        [] { return AllocSetContextCreate(TopMemoryContext, "pgq rights", ALLOCSET_SMALL_SIZES); });
    void* memory = pg::Guard([context] { return MemoryContextAlloc(context, sizeof(HolderList)); });
    holders = new (memory) HolderList(pg::ContextAllocator<core::RightsHolder>(context));
    rights_context = context;
  }
  // Read before the load: an invalidation processed during it makes the
  // next call load again.
  const uint64 begun = loaded.Begin();
  loaded.Clear();
  holders->clear();
  {
    const std::vector<core::RightsHolder> rows = store::RightsHolders(spi);
    holders->assign(rows.begin(), rows.end());
  }
  std::stable_sort(holders->begin(), holders->end());
  loaded.Mark(begun);
  return *holders;
}

}  // namespace

std::string WantedNames(uint8 wanted) {
  std::string names;
  for (const uint8 right : {core::kProduce, core::kConsume, core::kAdmin}) {
    if ((wanted & right) == 0) continue;
    if (!names.empty()) names += " or ";
    names += core::RightName(right);
  }
  return names;
}

// The first right of `wanted` (a hint names one grant to make).
std::string_view FirstRight(uint8 wanted) {
  for (const uint8 right : {core::kProduce, core::kConsume, core::kAdmin}) {
    if ((wanted & right) != 0) return core::RightName(right);
  }
  return "";
}

// A literal for a hint's SQL, as quote_literal writes it: a role named
// o'brien must give a hint that grants to o'brien when pasted, nothing else.
std::string Literal(std::string_view value) {
  const std::string copy(value);
  return std::string(pg::Guard([&] { return quote_literal_cstr(copy.c_str()); }));
}

bool HasPrivsOf(Oid member, Oid role) {
  return pg::Guard([&] { return has_privs_of_role(member, role); });
}

bool IsSuperuser(Oid role) {
  return pg::Guard([role] { return superuser_arg(role); });
}

std::string CurrentRoleName() {
  // The string is built outside Guard: nothing with a destructor in there.
  const char* name = pg::Guard([] { return GetUserNameFromId(GetUserId(), false); });
  return std::string(name);
}

bool HoldsRight(pg::SpiSession& spi, Oid role, int32 queue_id, uint8 wanted) {
  if (IsSuperuser(role)) return true;
  return core::HoldsRight(Holders(spi), role, queue_id, wanted, HasPrivsOf);
}

void RequireRight(pg::SpiSession& spi, int32 queue_id, std::string_view name, uint8 wanted) {
  if (HoldsRight(spi, GetUserId(), queue_id, wanted)) return;
  const std::string role = CurrentRoleName();
  pg::Raise(ERRCODE_INSUFFICIENT_PRIVILEGE,
            "permission denied for queue \"" + std::string(name) + "\"",
            "Role \"" + role + "\" holds no " + WantedNames(wanted) + " right on it.",
            "The queue's owner or a superuser can grant it: SELECT pgq.grant(" + Literal(role) +
                ", " + Literal(name) + ", " + Literal(FirstRight(wanted)) + ");");
}

void RequireRightOnQueueId(pg::SpiSession& spi, int32 queue_id, uint8 wanted) {
  if (HoldsRight(spi, GetUserId(), queue_id, wanted)) return;
  // By id, not by name: a role that may not use the queue does not learn
  // its name from a job id.
  const std::string role = CurrentRoleName();
  pg::Raise(ERRCODE_INSUFFICIENT_PRIVILEGE,
            "permission denied for queue id " + std::to_string(queue_id),
            "Role \"" + role + "\" holds no " + WantedNames(wanted) + " right on it.",
            "The queue's owner or a superuser can grant it with pgq.grant.");
}

void RequireRightSomewhere(pg::SpiSession& spi, uint8 wanted) {
  // The last "yes", for the per-job paths (complete, fail, extend run
  // thousands of times a second), where the walk would look at every
  // queue's owner. Only a yes is kept: this check is the early refusal, and
  // the job's own queue is still checked after the statement.
  static struct {
    bool valid;
    uint64 epoch;
    Oid role;
    uint8 wanted;
  } held{};
  const Oid role = GetUserId();
  // A role that holds one of the rights in held.wanted holds one of any
  // superset of them.
  if (held.valid && held.epoch == loaded.Current() && held.role == role &&
      (held.wanted & wanted) == held.wanted) {
    return;
  }
  if (IsSuperuser(role)) return;
  if (core::HoldsRightAnywhere(Holders(spi), role, wanted, HasPrivsOf)) {
    // Kept while the holders it was read from are.
    held = {loaded.Valid(), loaded.Current(), role, wanted};
    return;
  }
  const std::string name = CurrentRoleName();
  pg::Raise(ERRCODE_INSUFFICIENT_PRIVILEGE,
            "permission denied: role \"" + name + "\" holds no " + WantedNames(wanted) +
                " right on any queue",
            {},
            "A queue's owner or a superuser can grant one: SELECT pgq.grant(" + Literal(name) +
                ", '<queue>', " + Literal(FirstRight(wanted)) + ");");
}

QueueScope QueuesWithRight(pg::SpiSession& spi, uint8 wanted) {
  // The last answer: the per-job paths (complete, fail, extend) ask it
  // thousands of times a second, with the same role and right.
  static struct {
    bool valid;
    uint64 epoch;
    Oid role;
    uint8 wanted;
    QueueScope scope;
  } last{};
  const Oid role = GetUserId();
  if (last.valid && last.epoch == loaded.Current() && last.role == role && last.wanted == wanted) {
    return last.scope;
  }
  const HolderList& list = Holders(spi);  // also makes rights_context
  QueueScope scope{IsSuperuser(role), 0};
  std::vector<int32> ids;
  if (!scope.every) {
    for (const core::RightsHolder& holder : list) {
      if ((holder.rights & wanted) == 0 || !HasPrivsOf(role, holder.role)) continue;
      if (holder.queue_id == core::kEveryQueue) {
        scope.every = true;
        break;
      }
      if (ids.empty() || ids.back() != holder.queue_id) ids.push_back(holder.queue_id);
    }
  }
  // Read after Holders(): built from what it loaded, kept while that is.
  const uint64 epoch = loaded.Current();
  const bool valid = loaded.Valid();
  if (last.valid && last.scope.ids != 0) {
    pg::Guard([] { pfree(DatumGetPointer(last.scope.ids)); });
    last.valid = false;
  }
  scope.ids = pg::Guard([&] {
    MemoryContext old = MemoryContextSwitchTo(rights_context);
    Datum* elements = static_cast<Datum*>(palloc(sizeof(Datum) * (ids.size() + 1)));
    for (size_t i = 0; i < ids.size(); ++i) elements[i] = Int32GetDatum(ids[i]);
    ArrayType* array = construct_array(elements, static_cast<int>(ids.size()), INT4OID,
                                       sizeof(int32), true, TYPALIGN_INT);
    pfree(elements);
    MemoryContextSwitchTo(old);
    return PointerGetDatum(array);
  });
  last = {valid, epoch, role, wanted, scope};
  return scope;
}

void RequireRightOnEveryQueue(pg::SpiSession& spi, uint8 wanted, std::string_view action) {
  if (HoldsRight(spi, GetUserId(), core::kEveryQueue, wanted)) return;
  const std::string name = CurrentRoleName();
  pg::Raise(ERRCODE_INSUFFICIENT_PRIVILEGE, "permission denied to " + std::string(action),
            "It takes the " + WantedNames(wanted) + " right on every queue; role \"" + name +
                "\" does not hold it.",
            "A superuser can grant it: SELECT pgq.grant(" + Literal(name) + ", NULL, " +
                Literal(FirstRight(wanted)) + ");");
}

}  // namespace pgq::service
