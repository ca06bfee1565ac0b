// Teams that take turns: pgq.teams, pgq.team_members, pgq.assignments
// (store/coordination.h). Whose turn it is comes from core::NextTurnIndex
// (the fairness rule is written down in core/turns.h).
#include "core/turns.h"
#include "pg/allocator.h"
#include "pg/args.h"
#include "store/coordination.h"

namespace pgq::store {

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

}  // namespace

std::optional<int32> CreateTeam(pg::SpiSession& spi, std::string_view team) {
  pg::Params params;
  params.Set(0, pg::TextDatum(team));
  const pg::Result created = spi.Execute(create_team, params);
  if (created.size() != 1) return std::nullopt;
  return created.Int32(0, "team_id");
}

std::optional<int32> TeamId(pg::SpiSession& spi, std::string_view team) {
  pg::Params params;
  params.Set(0, pg::TextDatum(team));
  const pg::Result found = spi.Execute(find_team, params, 1);
  if (found.empty()) return std::nullopt;
  return found.Int32(0, "team_id");
}

std::optional<LockedTeam> LockTeam(pg::SpiSession& spi, std::string_view team) {
  pg::Params params;
  params.Set(0, pg::TextDatum(team));
  const pg::Result locked = spi.Execute(lock_team, params, 1);
  if (locked.empty()) return std::nullopt;
  return LockedTeam{locked.Int32(0, "team_id"), locked.Int64(0, "last_member_id")};
}

std::optional<int64> AddMember(pg::SpiSession& spi, int32 team_id, std::string_view member) {
  pg::Params params;
  params.Set(0, Int32GetDatum(team_id)).Set(1, pg::TextDatum(member));
  const pg::Result added = spi.Execute(insert_member, params);
  if (added.size() != 1) return std::nullopt;
  return added.Int64(0, "member_id");
}

std::optional<int64> MemberId(pg::SpiSession& spi, int32 team_id, std::string_view member) {
  pg::Params params;
  params.Set(0, Int32GetDatum(team_id)).Set(1, pg::TextDatum(member));
  const pg::Result found = spi.Execute(find_member, params, 1);
  if (found.size() != 1) return std::nullopt;
  return found.Int64(0, "member_id");
}

std::optional<bool> SetMemberActive(pg::SpiSession& spi, int32 team_id, std::string_view member,
                                    bool active) {
  pg::Params params;
  params.Set(0, Int32GetDatum(team_id)).Set(1, pg::TextDatum(member)).Set(2, BoolGetDatum(active));
  const pg::Result stored = spi.Execute(set_active, params);
  if (stored.empty()) return std::nullopt;
  return stored.Bool(0, "active");
}

bool RemoveMember(pg::SpiSession& spi, int32 team_id, std::string_view member) {
  pg::Params params;
  params.Set(0, Int32GetDatum(team_id)).Set(1, pg::TextDatum(member));
  return spi.Execute(delete_member, params).size() == 1;
}

std::optional<Member> NextMember(pg::SpiSession& spi, const LockedTeam& team) {
  pg::Params params;
  params.Set(0, Int32GetDatum(team.id));
  const pg::Result active = spi.Execute(active_members, params);
  if (active.empty()) return std::nullopt;
  const int id_column = active.ColumnNumber("member_id");
  auto ids = pg::MakeSmallVector<int64, 16>(CurrentMemoryContext);
  ids.reserve(active.size());
  for (uint64 row = 0; row < active.size(); ++row) ids.push_back(active.Int64(row, id_column));
  const std::size_t next = core::NextTurnIndex(ids.data(), ids.size(), team.last_member_id);
  if (next == ids.size()) return std::nullopt;
  return Member{ids[next], active.Text(next, "name")};
}

bool SpendTurn(pg::SpiSession& spi, int32 team_id, int64 member_id) {
  pg::Params params;
  params.Set(0, Int32GetDatum(team_id)).Set(1, Int64GetDatum(member_id));
  return spi.Execute(spend_turn, params).size() == 1;
}

std::optional<std::string> SubjectOwner(pg::SpiSession& spi, std::string_view team,
                                        std::string_view subject) {
  pg::Params params;
  params.Set(0, pg::TextDatum(team)).Set(1, pg::TextDatum(subject));
  const pg::Result owned = spi.Execute(find_owner, params, 1);
  if (owned.size() != 1) return std::nullopt;
  return owned.Text(0, "owner");
}

bool Assign(pg::SpiSession& spi, int32 team_id, std::string_view subject, const Member& member) {
  pg::Params params;
  params.Set(0, Int32GetDatum(team_id))
      .Set(1, pg::TextDatum(subject))
      .Set(2, Int64GetDatum(member.id))
      .Set(3, pg::TextDatum(member.name));
  return spi.Execute(insert_assignment, params).size() == 1;
}

}  // namespace pgq::store
