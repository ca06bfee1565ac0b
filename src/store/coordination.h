// Coordination: the statements on teams that take turns (pgq.teams,
// pgq.team_members, pgq.assignments; teams.cpp) and on the small shared
// facts (pgq.switches, pgq.ladders, pgq.once_keys; signals.cpp). The SQL
// functions are api/coordination_teams.cpp and api/coordination_signals.cpp;
// every statement here is race-free on its own (ON CONFLICT, or under the
// team's row lock), and the callers say which lock they hold.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "pg/spi.h"

namespace pgq::store {

// ---- Teams (teams.cpp).

// Creates team `team` unless it exists: its id when this call created it.
// Another session creating the same team makes this one wait for it and
// then skip (nullopt): TeamId sees it then.
std::optional<int32> CreateTeam(pg::SpiSession& spi, std::string_view team);
// The id of team `team`, if it exists.
std::optional<int32> TeamId(pg::SpiSession& spi, std::string_view team);

// A team whose row this transaction holds locked (FOR NO KEY UPDATE), and
// its cursor: the member whose turn was taken last.
struct LockedTeam {
  int32 id;
  int64 last_member_id;
};
// Locks team `team`'s row until the end of the transaction; nullopt when
// there is no such team.
std::optional<LockedTeam> LockTeam(pg::SpiSession& spi, std::string_view team);

// Adds `member` to team `team_id`: its new id, or nullopt when it is a
// member already.
std::optional<int64> AddMember(pg::SpiSession& spi, int32 team_id, std::string_view member);
// The id of `member` of team `team_id`, if it is one.
std::optional<int64> MemberId(pg::SpiSession& spi, int32 team_id, std::string_view member);
// Stores whether `member` takes turns; the stored flag, nullopt when it is
// not a member.
std::optional<bool> SetMemberActive(pg::SpiSession& spi, int32 team_id, std::string_view member,
                                    bool active);
// Removes `member`; whether it was one.
bool RemoveMember(pg::SpiSession& spi, int32 team_id, std::string_view member);

struct Member {
  int64 id;
  std::string name;
};
// The active member whose turn is next after the team's cursor (the rule is
// core::NextTurnIndex), without spending the turn; nullopt when nobody is
// active. The caller holds the team's row lock (LockTeam).
std::optional<Member> NextMember(pg::SpiSession& spi, const LockedTeam& team);
// Spends the turn: `member_id` took it. False if the locked row is gone.
bool SpendTurn(pg::SpiSession& spi, int32 team_id, int64 member_id);

// The owner of `subject` in team `team`, if it has one.
std::optional<std::string> SubjectOwner(pg::SpiSession& spi, std::string_view team,
                                        std::string_view subject);
// Gives `subject` to `member` of team `team_id` (at the team's next turn):
// true, or false when the subject has an owner already (only the first is
// stored).
bool Assign(pg::SpiSession& spi, int32 team_id, std::string_view subject, const Member& member);

// ---- Switches, ladders and once keys (signals.cpp).

// Stores `value` (last write wins); the stored value.
bool SetSwitch(pg::SpiSession& spi, std::string_view name, bool value);
// The value of switch `name`, nullopt if never set.
std::optional<bool> Switch(pg::SpiSession& spi, std::string_view name);
// Climbs `subject`'s ladder to `step`: the step stored, or nullopt when it
// was at `step` or above already (its row is locked then, so LadderStep
// reads the latest).
std::optional<int32> ClimbLadder(pg::SpiSession& spi, std::string_view subject, int32 step);
// The step of `subject`'s ladder, if it has one.
std::optional<int32> LadderStep(pg::SpiSession& spi, std::string_view subject);
// Takes once key `key`: true for the first caller. A concurrent caller with
// the same key waits for the first one's transaction: it takes the key if
// that one rolled back, and gets false if it committed.
bool TakeOnceKey(pg::SpiSession& spi, std::string_view key);

}  // namespace pgq::store
