// Whose turn it is: the one rule behind pgq.next_turn and pgq.assign.
//
// The fairness rule. Members are served in ascending order of their stable
// id (given when they join, never changed, not their name), cyclically. The
// team remembers the id of the member it served last (the cursor). A turn
// goes to the first active member whose id is greater than the cursor, or,
// when there is none, to the active member with the smallest id (a new round
// begins). Consequences, each covered by a unit test:
//  - with a fixed set of active members, turns go strictly round-robin:
//    over any k consecutive turns every one of k members is served once;
//  - a member who joins, or comes back from inactive, takes its place by id:
//    served later in this round if its id is above the cursor, else first
//    thing next round; nobody already waiting moves back;
//  - a member who leaves or is deactivated is simply skipped; the order of
//    the others does not change, so nobody is skipped and nobody is served
//    twice because someone else left (a "turn mod active count" rule gets
//    both wrong);
//  - between two turns of any member who stays active, every other member
//    who stays active is served at most once.
// Renaming a member changes nothing: names play no part.
#pragma once

#include <cstddef>
#include <cstdint>

namespace pgq::core {

// No member has been served yet (member ids start at 1).
inline constexpr int64_t kNoMemberServed = 0;

// Index into `active_ids` (ascending, distinct) of the member whose turn
// follows `last_served`; `count` when there is no active member.
std::size_t NextTurnIndex(const int64_t* active_ids, std::size_t count, int64_t last_served);

}  // namespace pgq::core
