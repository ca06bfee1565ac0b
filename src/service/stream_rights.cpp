#include "service/stream_rights.h"

#include <algorithm>
#include <vector>

#include "service/rights.h"
#include "pg/invalidation.h"

namespace pgq::service {

namespace {

// INVARIANT: sorted by stream id (RightsHolder::queue_id holds it); valid
// while `loaded` is. Built from the stream grants, the streams' owners and
// the roles (superuser, memberships).
std::vector<core::RightsHolder>* holders = nullptr;
pg::CacheEpoch loaded{pg::invalidation::kStreamGrants | pg::invalidation::kStreams |
                      pg::invalidation::kRoles};

const std::vector<core::RightsHolder>& Holders(pg::SpiSession& spi) {
  if (loaded.Valid()) return *holders;
  if (holders == nullptr) holders = new std::vector<core::RightsHolder>();
  const uint64 begun = loaded.Begin();
  loaded.Clear();
  holders->clear();
  *holders = store::streams::RightsHolders(spi);
  std::stable_sort(holders->begin(), holders->end());
  loaded.Mark(begun);
  return *holders;
}

}  // namespace

bool HoldsStreamRight(pg::SpiSession& spi, Oid role, int32 stream_id, uint8 wanted) {
  if (IsSuperuser(role)) return true;
  return core::HoldsRight(Holders(spi), role, stream_id, wanted, HasPrivsOf);
}

void RequireStreamRight(pg::SpiSession& spi, const store::streams::Stream& stream, uint8 wanted) {
  if (HoldsStreamRight(spi, GetUserId(), stream.id, wanted)) return;
  const std::string role = CurrentRoleName();
  pg::Raise(ERRCODE_INSUFFICIENT_PRIVILEGE, "permission denied for stream \"" + stream.name + "\"",
            "Role \"" + role + "\" holds no " + WantedNames(wanted) + " right on it.",
            "The stream's owner or a superuser can grant it: SELECT pgq.grant_stream(" +
                Literal(role) + ", " + Literal(stream.name) + ", " + Literal(FirstRight(wanted)) +
                ");");
}

void RequireStreamRightSomewhere(pg::SpiSession& spi, uint8 wanted, std::string_view action) {
  const Oid role = GetUserId();
  if (IsSuperuser(role) || core::HoldsRightAnywhere(Holders(spi), role, wanted, HasPrivsOf)) return;
  pg::Raise(ERRCODE_INSUFFICIENT_PRIVILEGE, "permission denied to " + std::string(action),
            "Role \"" + CurrentRoleName() + "\" holds no " + WantedNames(wanted) +
                " right on any stream.");
}

void RequireStreamRightOnEvery(pg::SpiSession& spi, uint8 wanted, std::string_view action) {
  if (HoldsStreamRight(spi, GetUserId(), core::kEveryQueue, wanted)) return;
  pg::Raise(ERRCODE_INSUFFICIENT_PRIVILEGE, "permission denied to " + std::string(action),
            "It takes the " + WantedNames(wanted) + " right on every stream.",
            "A superuser can grant it: SELECT pgq.grant_stream(" + Literal(CurrentRoleName()) +
                ", NULL, " + Literal(FirstRight(wanted)) + ");");
}

store::streams::Stream FindStream(pg::SpiSession& spi, std::string_view name) {
  std::optional<store::streams::Stream> stream = store::streams::Find(spi, name);
  if (!stream) {
    pg::Raise(ERRCODE_UNDEFINED_OBJECT, "stream \"" + std::string(name) + "\" does not exist", {},
              "Create it with pgq.create_stream('" + std::string(name) + "').");
  }
  return *std::move(stream);
}

}  // namespace pgq::service
