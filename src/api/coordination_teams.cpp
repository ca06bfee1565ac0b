// Teams that take turns: add_member, set_member_active, remove_member,
// next_turn, assign. Whose turn it is comes from core::NextTurnIndex (the
// fairness rule is written down in core/turns.h); the rows are the store's
// (store/coordination.h).
//
// Every turn is taken under the team's row lock (FOR NO KEY UPDATE), so
// concurrent callers are served one after the other, each seeing the cursor
// the previous one left. An error (no active member) aborts the caller's
// transaction, so a failed turn is never spent.
#include "pg/args.h"
#include "store/coordination.h"

namespace pgq::api {

namespace {

[[noreturn]] void RaiseUnknownTeam(std::string_view team) {
  pg::Raise(ERRCODE_UNDEFINED_OBJECT, "team \"" + std::string(team) + "\" does not exist", "",
            "Add a member with pgq.add_member to create the team.");
}

int32 TeamId(pg::SpiSession& spi, std::string_view team) {
  const std::optional<int32> id = store::TeamId(spi, team);
  if (!id) RaiseUnknownTeam(team);
  return *id;
}

store::LockedTeam LockTeam(pg::SpiSession& spi, std::string_view team) {
  const std::optional<store::LockedTeam> locked = store::LockTeam(spi, team);
  if (!locked) RaiseUnknownTeam(team);
  return *locked;
}

// The member whose turn is next, without spending it. Raises no_data_found
// when nobody is active.
store::Member ChooseMember(pg::SpiSession& spi, std::string_view team,
                           const store::LockedTeam& locked) {
  std::optional<store::Member> member = store::NextMember(spi, locked);
  if (!member) {
    pg::Raise(ERRCODE_NO_DATA_FOUND, "team \"" + std::string(team) + "\" has no active member",
              "No turn was taken.",
              "Add a member with pgq.add_member or activate one with pgq.set_member_active.");
  }
  return std::move(*member);
}

void SpendTurn(pg::SpiSession& spi, const store::LockedTeam& locked, const store::Member& member) {
  if (!store::SpendTurn(spi, locked.id, member.id)) {
    pg::Raise(ERRCODE_INTERNAL_ERROR, "locked team row vanished");
  }
}

}  // namespace

}  // namespace pgq::api

using namespace pgq;

// add_member(team, member) returns the member's stable id
PGQ_FUNCTION(pgq_add_member) {
  const std::string_view team = pg::KeyArg(fcinfo, 0, "team");
  const std::string_view member = pg::KeyArg(fcinfo, 1, "member");
  pg::SpiSession spi;
  // Another session creating the same team makes our insert wait for it and
  // then skip: the lookup after it sees the team.
  const std::optional<int32> created = store::CreateTeam(spi, team);
  const int32 team_id = created ? *created : api::TeamId(spi, team);
  if (const std::optional<int64> added = store::AddMember(spi, team_id, member)) {
    PG_RETURN_INT64(*added);
  }
  if (const std::optional<int64> found = store::MemberId(spi, team_id, member)) {
    PG_RETURN_INT64(*found);
  }
  // Inserted and removed by others between our two statements.
  pg::Raise(ERRCODE_T_R_SERIALIZATION_FAILURE,
            "member \"" + std::string(member) + "\" changed concurrently", "",
            "Retry the transaction.");
}

// set_member_active(team, member, active) returns the stored flag
PGQ_FUNCTION(pgq_set_member_active) {
  const std::string_view team = pg::KeyArg(fcinfo, 0, "team");
  const std::string_view member = pg::KeyArg(fcinfo, 1, "member");
  const bool active = pg::RequiredBool(fcinfo, 2, "active");
  pg::SpiSession spi;
  const std::optional<bool> stored =
      store::SetMemberActive(spi, api::TeamId(spi, team), member, active);
  if (!stored) {
    pg::Raise(ERRCODE_UNDEFINED_OBJECT, "member \"" + std::string(member) + "\" is not in team \"" +
                                            std::string(team) + "\"");
  }
  PG_RETURN_BOOL(*stored);
}

// remove_member(team, member) returns whether it was a member
PGQ_FUNCTION(pgq_remove_member) {
  const std::string_view team = pg::KeyArg(fcinfo, 0, "team");
  const std::string_view member = pg::KeyArg(fcinfo, 1, "member");
  pg::SpiSession spi;
  PG_RETURN_BOOL(store::RemoveMember(spi, api::TeamId(spi, team), member));
}

// next_turn(team) returns the member whose turn it is
PGQ_FUNCTION(pgq_next_turn) {
  const std::string_view team = pg::KeyArg(fcinfo, 0, "team");
  std::string chosen;
  {
    pg::SpiSession spi;
    const store::LockedTeam locked = api::LockTeam(spi, team);
    store::Member member = api::ChooseMember(spi, team, locked);
    api::SpendTurn(spi, locked, member);
    chosen = std::move(member.name);
  }
  return pg::TextDatum(chosen);
}

// assign(team, subject) returns the subject's owner
PGQ_FUNCTION(pgq_assign) {
  const std::string_view team = pg::KeyArg(fcinfo, 0, "team");
  const std::string_view subject = pg::KeyArg(fcinfo, 1, "subject");
  std::string owner;
  {
    pg::SpiSession spi;
    // Owned already: no lock, no turn.
    if (std::optional<std::string> owned = store::SubjectOwner(spi, team, subject)) {
      owner = std::move(*owned);
    } else {
      // Assigners of a team queue on its row lock; the one that waited sees
      // the owner its predecessor committed (a new snapshot per statement in
      // READ COMMITTED) and returns it without spending a turn.
      const store::LockedTeam locked = api::LockTeam(spi, team);
      if (std::optional<std::string> waited = store::SubjectOwner(spi, team, subject)) {
        owner = std::move(*waited);
      } else {
        store::Member member = api::ChooseMember(spi, team, locked);
        // The conditional write: only the first owner is stored.
        if (store::Assign(spi, locked.id, subject, member)) {
          api::SpendTurn(spi, locked, member);
          owner = std::move(member.name);
        } else if (std::optional<std::string> raced = store::SubjectOwner(spi, team, subject)) {
          owner = std::move(*raced);  // written without the team lock
        } else {
          pg::Raise(ERRCODE_T_R_SERIALIZATION_FAILURE,
                    "assignment of \"" + std::string(subject) + "\" changed concurrently", "",
                    "Retry the transaction.");
        }
      }
    }
  }
  return pg::TextDatum(owner);
}
