// The fair order of one ring's pending entries (ADR 0029, issue 34): the
// order in which a queue with fairness => 'group' hands out its ready jobs,
// across the group keys that have some, in proportion to their weights.
//
// How. The ring's cursor reads entries once, in the ring's order, as for any
// queue; a fair ring's cursor *files* each one (its place, opaque here) in
// a small FIFO of its key instead of handing it out. A claim *takes* the
// head of the eligible key with the least virtual finish time F (ties: the
// key that became active first), then adds kQuantum / weight to that key's
// F. A key that becomes active starts at max(its F, V), V the start of the
// last turn served: it is served before any key already served once more,
// so within one round. The claims of a ring are one sequence (the lane's
// claim lock), so any window of consecutive claims is fair within one job.
//
// Skipping and sweeping. Memory is fixed: a key holds at most `per_key`
// filed offers and all keys share `offers` cells. An entry that finds its
// key full, or no cell free, marks its key *skipping* at its place; every
// later entry of a skipping key is passed over by the cursor too, so a
// key's filed offers are always a prefix of its entries in ring order (its
// own order, run_at then id as appended, is kept), and the cursor always
// reaches the newest entries (a new key's job is filed at once, whatever
// backlog lies before it). A sweep refills the skipping keys that ran low:
// from BeginSweep()'s place the lane reads entries, offers each to Sweep()
// (which files a sweep key's entries from its mark on while it has room,
// and ignores everything else) and goes on at SweepNext() (the next place
// while some key reads on, else a jump to the next key's mark), up to the
// cursor; then EndSweep(): a key that had room for every entry up to the
// cursor stops skipping. A sweep reads what it files, the other keys'
// entries among them, and nothing between keys that need none.
//
// A claim, under the lane's claim lock: the late entries (FileLate) and
// the cursor file what they can; if SweepWanted(), a sweep, then both
// again (a sweep that ends a key's skipping may free the slot they stopped
// for); Take(); if nothing is taken while keys skip, a sweep, both, Take()
// again. A claim so made returns nothing only when no committed entry up
// to the cursor's is left unserved (test/unit/fair_order_test.cpp checks
// it on random rings, with late entries and cancels; it caught the late
// entries not filed again after a sweep).
//
// A late-committing entry (the cursor passed it while its insert was in
// progress, the lane's passed set) is filed by FileLate, past any limit,
// from a reserve of cells: it is never skipped, because a sweep never goes
// back behind a mark.
//
// More active keys than slots: an entry whose key finds no slot is not
// filed (kNoSlot) and the cursor stays at it until a slot is free — a key
// with no offer that is not skipping gives its slot back (its F forgotten:
// back, it starts at V) — so nothing is lost or reordered; the keys with
// slots are served meanwhile, and a key that is new then waits for one.
//
// Pure C++ over one block of memory with no pointers into itself (shared
// memory, pg/job_ring.cpp), so it is unit tested without PostgreSQL.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>

namespace pgq::core {

// An entry's place in its ring, larger is later in the cursor's order (the
// lane packs segment, block and offset).
using FairPlace = uint64_t;

// The virtual time a turn of a key of weight 1 costs; weight w costs
// kQuantum / w (weights 1 to kMaxFairWeight).
inline constexpr uint64_t kFairQuantum = 1000000000;
inline constexpr uint32_t kMaxFairWeight = 1000;

struct FairSizes {
  int32_t keys;     // key slots (at least 1)
  int32_t offers;   // offer cells the keys share (at least reserve + 1)
  int32_t per_key;  // offers a key may hold filed (at least 1)
  int32_t reserve;  // cells only FileLate takes
};

enum class FairFiled {
  kFiled,    // in its key's FIFO
  kSkipped,  // its key is skipping: a sweep files it later
  kIgnored,  // (Sweep) not the sweep's to file: filed already, or not skipping
  kNoSlot,   // (File) no slot for its key: the cursor stays at it
};

class FairOrder {
 public:
  // The bytes an order of `sizes` needs, and makes one in `memory` (that
  // many bytes, aligned for uint64_t).
  static std::size_t BytesFor(const FairSizes& sizes);
  static FairOrder* Make(void* memory, const FairSizes& sizes);

  // The cursor's entry of key `key` (a hash of the group key) at `place`,
  // with the key's weight now; `id`, its job's (a key's rows and entries
  // are served in id order between them: FileRow).
  FairFiled File(uint64_t key, uint32_t weight, FairPlace place, int64_t id = 0);
  // An entry the cursor passed while it was being written, once it is
  // committed: filed past the key's limit, from the reserve when nothing
  // else is free (kFiled); kSkipped when its key is skipping and it lies at
  // or past the mark (a sweep files it: drop it from the passed set);
  // kNoSlot when no slot or cell is left (keep it and try again).
  FairFiled FileLate(uint64_t key, uint32_t weight, FairPlace place, int64_t id = 0);

  struct Taken {
    FairPlace place;  // an entry's place; a row's id when `row`
    uint64_t key;
    bool row = false;  // a due row of pgq.job_rows (FileRow), not an entry
  };
  // The clock of the claims to come (microseconds) and the queue's
  // rate_limit_per_key (jobs a second; 0: none): a key starts a job at
  // most every 1/rate seconds, a start not made never saved up (so in any
  // window of T seconds a key starts at most rate * T + 1 jobs), and Take
  // passes over a key whose next start is not due. A key keeps its slot,
  // with no offer, until its next start is due.
  void SetClock(int64_t now_us, double rate);

  // The next offer in fair order among the keys `eligible(context, key)`
  // allows now (a group's cap) that have a start in their bucket; nullopt
  // when none has one. A key passed over keeps its turn.
  std::optional<Taken> Take(bool (*eligible)(void* context, uint64_t key), void* context);
  std::optional<Taken> Take() { return Take(nullptr, nullptr); }

  // Whether a sweep should run: a skipping key is down to half its room,
  // and a batch can be filed (half a key's room; a quarter of the cells when
  // they ran out): each sweep reads from the least mark, so it must file
  // enough to pay for its reads.
  bool SweepWanted() const;
  // A sweep: its keys (the skipping keys down to half their room; none
  // such, every skipping key with room) and the place to read first, the
  // least of their marks; nullopt: nothing to sweep.
  std::optional<FairPlace> BeginSweep();
  // The entry the sweep read at `place` (committed, not cancelled, not in
  // the passed set).
  FairFiled Sweep(uint64_t key, uint32_t weight, FairPlace place, int64_t id = 0);
  // The entry the sweep read at `place` is cancelled (noted by the lane):
  // true if a key of the sweep read past it (its mark moves on: the note
  // may go), false if no sweep key needs it yet (keep the note).
  bool Pass(uint64_t key, FairPlace place);
  // The place to read after `place`: the next one while a key of the sweep
  // reads on from its mark, else the next such mark (the entries between
  // are no sweep key's); nullopt when every key is full or no cell is left.
  std::optional<FairPlace> SweepNext(FairPlace place);
  // The sweep read every entry it was sent to before `reached`:
  // `at_cursor`, it went up to the cursor (a key that had room for all of
  // its entries stops skipping); else it stopped (SweepNext said so).
  void EndSweep(FairPlace reached, bool at_cursor);

  // Due rows of the table beside the ring (retries, scheduled jobs, a
  // capped group's jobs let in: pgq.job_rows), in the same turns as the
  // entries. The lane's scan of the table, between BeginRows() and
  // EndRows(), files each key's first due rows by id (FileRow), replacing
  // what the key held. A key keeps its slot and its F across scans, so a
  // scan gives no key a turn it did not earn. A key with rows is active as
  // one with offers is; Take() serves a key's rows and offers in id order
  // between them (its offers are filed with their ids: a capped group's
  // job let in from the table goes after its jobs still on the ring, a
  // retry of its head before them). Rows take at most a quarter of the
  // cells and a key's room (per_key) of them; kSkipped when there is no
  // room (the next scan files it), kNoSlot when no slot.
  // `from_first`: the scan began at the table's first due row (else it
  // goes on after an earlier one's cut, and files no key named since the
  // last that began there: their first rows lay before the cut).
  // `complete`: it began there and read every due row (only then are the
  // rows of the keys it did not name dropped, and their slots freed).
  void BeginRows(bool from_first = true);
  FairFiled FileRow(uint64_t key, uint32_t weight, int64_t row);
  void EndRows(bool complete = true);
  int32_t RowsFiled() const;
  // Whether the last scan named a key (whose slot it keeps, with its F,
  // while its filed rows ran out): a scan that finds no row due (BeginRows,
  // EndRows) lets them go.
  bool RowsNamed() const;
  // Whether a key's filed rows ran out since the last scan (a capped
  // group's next job is let in at each completion: the table may hold it).
  bool RowsRanDry() const;

  // Every key's weight as `weight_of(context, key)` says now (its turns
  // from the next one on): after a change of the queue's weights.
  void Reweigh(uint32_t (*weight_of)(void* context, uint64_t key), void* context);
  // Whether `key` is skipping: a cancelled entry of it the cursor passes
  // over lies past its mark, and a sweep will read it again (the lane keeps
  // its note until Pass says a sweep read past it).
  bool Skipping(uint64_t key) const;
  // The offer the next Take() without a filter would take (nothing taken).
  std::optional<Taken> Next() const;
  // A cancel of the entry of `key` at `place`: kFiled, it was an offer and
  // is taken out of its key's FIFO; kSkipped, its key is skipping and it
  // lies at or past the mark (a sweep would file it: the lane notes it
  // cancelled); kIgnored, neither (handed out, or never seen).
  FairFiled Remove(uint64_t key, FairPlace place);
  // The least place the order still holds (an offer, a skipping key's
  // mark): no entry before it is needed again. nullopt: none.
  std::optional<FairPlace> Least() const;
  // Every place held moves `delta` earlier (the lane renumbers its places:
  // each held one is at least `delta`).
  void Rebase(FairPlace delta);

  // What monitoring shows of a key (pgq.fair_keys).
  struct KeyView {
    uint64_t key;
    uint32_t weight;
    int32_t filed;    // offers it holds (rows among them)
    bool skipping;    // more of its entries wait on the ring
    uint64_t served;  // claims since it became active
    FairPlace at;     // its next offer's place, else its mark (has_place)
    bool has_place;
    // Its next row's id (FileRow), else, while the last scan names it,
    // the row it took last; 0: none.
    int64_t row;
  };
  // Up to `max` of the keys in use (in slot order); how many.
  int32_t Keys(KeyView* out, int32_t max) const;

  int32_t FiledCount() const;
  int32_t SkippingKeys() const;
  int32_t KeysInUse() const;

 private:
  struct Header;
  struct Key;
  struct Cell;
  Header& header();
  const Header& header() const;
  Key* keys();
  const Key* keys() const;
  Cell* cells();
  const Cell* cells() const;
  int32_t FindSlot(uint64_t key) const;
  int32_t* heap();
  const int32_t* heap() const;
  int32_t* skip_list();
  uint64_t* scratch();
  int32_t* row_list();
  void ClearRows(int32_t slot);
  void RowUnlist(int32_t slot);
  void Unlist(int32_t* list, int32_t* size, int32_t Key::*index, int32_t slot);
  void StartSkipping(int32_t slot);
  void StopSkipping(int32_t slot);
  int32_t* targets();

  int32_t SlotOf(uint64_t key, bool make);
  int32_t ProbeSlot(uint64_t key, bool make);
  bool Idle(int32_t slot) const;
  bool Ready(int32_t slot) const;
  void FreeIfDone(int32_t slot);
  void FreeSlot(int32_t slot);
  bool HasRoom(int32_t slot) const;
  void Link(int32_t slot, uint32_t weight, FairPlace place, int64_t id);
  bool RowFirst(const Key& key) const;
  void Activate(int32_t slot);
  Taken TakeFrom(int32_t slot);
  bool Before(int32_t a, int32_t b);
  void HeapPush(int32_t slot);
  int32_t HeapPop();
  void HeapRemove(int32_t slot);
  void HeapSiftUp(int32_t at);
  void HeapSiftDown(int32_t at);
};

}  // namespace pgq::core
