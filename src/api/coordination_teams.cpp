// Teams that take turns: add_member, set_member_active, remove_member,
// next_turn, assign. Whose turn it is comes from core::NextTurnIndex (the
// fairness rule is written down in core/turns.h).
//
// Every turn is taken under the team's row lock (FOR NO KEY UPDATE), so
// concurrent callers are served one after the other, each seeing the cursor
// the previous one left. An error (no active member) aborts the caller's
// transaction, so a failed turn is never spent.
#include "core/turns.h"
#include "pg/allocator.h"
#include "pg/args.h"
#include "pg/spi.h"

namespace pgq::api {

namespace {

pg::Statement create_team = {
    "INSERT INTO pgq.teams (name) VALUES ($1) ON CONFLICT (name) DO NOTHING RETURNING team_id",
    1,
    {TEXTOID},
    nullptr};

pg::Statement find_team = {"SELECT team_id FROM pgq.teams WHERE name = $1", 1, {TEXTOID}, nullptr};

pg::Statement lock_team = {
    "SELECT team_id, last_member_id FROM pgq.teams WHERE name = $1 FOR NO KEY UPDATE",
    1,
    {TEXTOID},
    nullptr};

pg::Statement insert_member = {
    "INSERT INTO pgq.team_members (team_id, name) VALUES ($1, $2)"
    " ON CONFLICT (team_id, name) DO NOTHING RETURNING member_id",
    2,
    {INT4OID, TEXTOID},
    nullptr};

pg::Statement find_member = {
    "SELECT member_id FROM pgq.team_members WHERE team_id = $1 AND name = $2",
    2,
    {INT4OID, TEXTOID},
    nullptr};

pg::Statement set_active = {
    "UPDATE pgq.team_members SET active = $3 WHERE team_id = $1 AND name = $2 RETURNING active",
    3,
    {INT4OID, TEXTOID, BOOLOID},
    nullptr};

pg::Statement delete_member = {"DELETE FROM pgq.team_members WHERE team_id = $1 AND name = $2",
                               2,
                               {INT4OID, TEXTOID},
                               nullptr};

pg::Statement active_members = {
    "SELECT member_id, name FROM pgq.team_members WHERE team_id = $1 AND active"
    " ORDER BY member_id",
    1,
    {INT4OID},
    nullptr};

pg::Statement spend_turn = {
    "UPDATE pgq.teams SET turn = turn + 1, last_member_id = $2 WHERE team_id = $1 RETURNING turn",
    2,
    {INT4OID, INT8OID},
    nullptr};

pg::Statement find_owner = {
    "SELECT a.owner FROM pgq.assignments a JOIN pgq.teams t ON t.team_id = a.team_id"
    " WHERE t.name = $1 AND a.subject = $2",
    2,
    {TEXTOID, TEXTOID},
    nullptr};

pg::Statement insert_assignment = {
    "INSERT INTO pgq.assignments (team_id, subject, member_id, owner, turn)"
    " SELECT $1, $2, $3, $4, t.turn + 1 FROM pgq.teams t WHERE t.team_id = $1"
    " ON CONFLICT (team_id, subject) DO NOTHING",
    4,
    {INT4OID, TEXTOID, INT8OID, TEXTOID},
    nullptr};

[[noreturn]] void RaiseUnknownTeam(std::string_view team) {
  pg::Raise(ERRCODE_UNDEFINED_OBJECT, "team \"" + std::string(team) + "\" does not exist", "",
            "Add a member with pgq.add_member to create the team.");
}

int32 TeamId(pg::SpiSession& spi, std::string_view team) {
  pg::Params params;
  params.Set(0, pg::TextDatum(team));
  const pg::Result found = spi.Execute(find_team, params, 1);
  if (found.empty()) RaiseUnknownTeam(team);
  return found.Int32(0, 1);
}

// A team whose row this transaction holds locked, and its cursor.
struct LockedTeam {
  int32 id;
  int64 last_member_id;
};

LockedTeam LockTeam(pg::SpiSession& spi, std::string_view team) {
  pg::Params params;
  params.Set(0, pg::TextDatum(team));
  const pg::Result locked = spi.Execute(lock_team, params, 1);
  if (locked.empty()) RaiseUnknownTeam(team);
  return LockedTeam{locked.Int32(0, 1), locked.Int64(0, 2)};
}

struct Member {
  int64 id;
  std::string name;
};

// The member whose turn is next, without spending it. Raises no_data_found
// when nobody is active.
Member ChooseMember(pg::SpiSession& spi, std::string_view team, const LockedTeam& locked) {
  pg::Params params;
  params.Set(0, Int32GetDatum(locked.id));
  const pg::Result active = spi.Execute(active_members, params);
  auto ids = pg::MakeSmallVector<int64, 16>(CurrentMemoryContext);
  ids.reserve(active.size());
  for (uint64 row = 0; row < active.size(); ++row) ids.push_back(active.Int64(row, 1));
  const std::size_t next = core::NextTurnIndex(ids.data(), ids.size(), locked.last_member_id);
  if (next == ids.size()) {
    pg::Raise(ERRCODE_NO_DATA_FOUND, "team \"" + std::string(team) + "\" has no active member",
              "No turn was taken.",
              "Add a member with pgq.add_member or activate one with pgq.set_member_active.");
  }
  return Member{ids[next], active.Text(next, 2)};
}

void SpendTurn(pg::SpiSession& spi, const LockedTeam& locked, const Member& member) {
  pg::Params params;
  params.Set(0, Int32GetDatum(locked.id)).Set(1, Int64GetDatum(member.id));
  if (spi.Execute(spend_turn, params).size() != 1) {
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
  pg::Params name;
  name.Set(0, pg::TextDatum(team));
  // Another session creating the same team makes our insert wait for it and
  // then skip: the lookup after it sees the team.
  const pg::Result created = spi.Execute(api::create_team, name);
  const int32 team_id = created.size() == 1 ? created.Int32(0, 1) : api::TeamId(spi, team);
  pg::Params params;
  params.Set(0, Int32GetDatum(team_id)).Set(1, pg::TextDatum(member));
  if (const pg::Result added = spi.Execute(api::insert_member, params); added.size() == 1) {
    PG_RETURN_INT64(added.Int64(0, 1));
  }
  if (const pg::Result found = spi.Execute(api::find_member, params, 1); found.size() == 1) {
    PG_RETURN_INT64(found.Int64(0, 1));
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
  pg::Params params;
  params.Set(0, Int32GetDatum(api::TeamId(spi, team)))
      .Set(1, pg::TextDatum(member))
      .Set(2, BoolGetDatum(active));
  const pg::Result stored = spi.Execute(api::set_active, params);
  if (stored.empty()) {
    pg::Raise(ERRCODE_UNDEFINED_OBJECT, "member \"" + std::string(member) + "\" is not in team \"" +
                                            std::string(team) + "\"");
  }
  PG_RETURN_BOOL(stored.Bool(0, 1));
}

// remove_member(team, member) returns whether it was a member
PGQ_FUNCTION(pgq_remove_member) {
  const std::string_view team = pg::KeyArg(fcinfo, 0, "team");
  const std::string_view member = pg::KeyArg(fcinfo, 1, "member");
  pg::SpiSession spi;
  pg::Params params;
  params.Set(0, Int32GetDatum(api::TeamId(spi, team))).Set(1, pg::TextDatum(member));
  PG_RETURN_BOOL(spi.Execute(api::delete_member, params).size() == 1);
}

// next_turn(team) returns the member whose turn it is
PGQ_FUNCTION(pgq_next_turn) {
  const std::string_view team = pg::KeyArg(fcinfo, 0, "team");
  std::string chosen;
  {
    pg::SpiSession spi;
    const api::LockedTeam locked = api::LockTeam(spi, team);
    api::Member member = api::ChooseMember(spi, team, locked);
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
    pg::Params lookup;
    lookup.Set(0, pg::TextDatum(team)).Set(1, pg::TextDatum(subject));
    // Owned already: no lock, no turn.
    if (const pg::Result owned = spi.Execute(api::find_owner, lookup, 1); owned.size() == 1) {
      owner = owned.Text(0, 1);
    } else {
      // Assigners of a team queue on its row lock; the one that waited sees
      // the owner its predecessor committed (a new snapshot per statement in
      // READ COMMITTED) and returns it without spending a turn.
      const api::LockedTeam locked = api::LockTeam(spi, team);
      if (const pg::Result waited = spi.Execute(api::find_owner, lookup, 1); waited.size() == 1) {
        owner = waited.Text(0, 1);
      } else {
        api::Member member = api::ChooseMember(spi, team, locked);
        pg::Params assignment;
        assignment.Set(0, Int32GetDatum(locked.id))
            .Set(1, pg::TextDatum(subject))
            .Set(2, Int64GetDatum(member.id))
            .Set(3, pg::TextDatum(member.name));
        // The conditional write: only the first owner is stored.
        if (spi.Execute(api::insert_assignment, assignment).size() == 1) {
          api::SpendTurn(spi, locked, member);
          owner = std::move(member.name);
        } else if (const pg::Result raced = spi.Execute(api::find_owner, lookup, 1);
                   raced.size() == 1) {
          owner = raced.Text(0, 1);  // written without the team lock
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
