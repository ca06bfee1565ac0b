#include "core/fair_order.h"

#include <algorithm>
#include <new>

namespace pgq::core {

// The block: the header, then the key slots, the offer cells and the heap
// of active keys (slot numbers), each array aligned as its first member.
struct FairOrder::Header {
  FairSizes sizes;
  int32_t filed;        // offers in the keys' FIFOs
  int32_t skipping;     // keys skipping
  int32_t keys_in_use;  // slots holding a key
  int32_t free_head;    // the free cells, linked by Cell::next
  int32_t free_count;
  int32_t heap_size;
  bool low_skipping;    // a skipping key went down to half its room since the last sweep
  bool pool_bound;      // a key skipped for want of a cell since the last sweep
  int32_t targets;      // the sweep's keys (targets(), by mark)
  int32_t next_target;  // the first of them the sweep has not reached
  int32_t active;       // reached, with room still
  uint64_t now;         // V: the start of the turn served last
  uint64_t turns;       // a number for each activation, the ties' order
  int64_t interval;     // SetClock: microseconds between a key's starts (0: no limit)
  int64_t clock;        // SetClock: now, in microseconds
  int32_t rows_filed;   // due rows in the keys' row FIFOs
  int32_t row_keys;     // keys holding rows or named by the last scan (row_list())
  uint64_t row_scan;    // BeginRows: the scan filing now
  uint64_t rotation;    // the last scan that began at the table's first due row
  bool from_first;      // the scan filing now began there
  bool rows_ran_dry;    // a key's filed rows ran out since the last scan
};

struct FairOrder::Key {
  uint64_t hash;
  uint64_t finish;  // F: where the key's next turn ends
  uint64_t seq;     // when it entered the heap (ties)
  FairPlace mark;   // skipping: its first entry not filed
  uint32_t weight;
  int32_t head;  // its FIFO of cells, -1 when empty
  int32_t tail;
  int32_t count;
  int32_t heap_index;   // -1 when not in the heap
  int32_t skip_index;   // skipping: its place in the skipping list, else -1
  int32_t next_parked;  // Take: the keys passed over, linked
  int64_t ready_at;     // its next start may be made from then on (rate limit)
  uint64_t served;      // claims since it took its slot
  int32_t row_head;     // its FIFO of due rows (ids), -1 when empty
  int32_t row_tail;
  int32_t row_count;
  int32_t row_index;  // holding rows or named: its place in the row list, else -1
  uint64_t row_scan;  // the scan that filed its rows
  int64_t last_row;   // the id of the row it took last (0: none)
  bool used;
  bool skipping;
  bool target;  // one of the sweep's keys, not yet full
  bool active;  // the sweep has read on from its mark
};

struct FairOrder::Cell {
  FairPlace place;  // an entry's place; a row's id
  int64_t id;       // the job's id: a key's jobs go in id order
  int32_t next;
};

namespace {

std::size_t AlignUp(std::size_t n) { return (n + 7) & ~std::size_t{7}; }

}  // namespace

std::size_t FairOrder::BytesFor(const FairSizes& sizes) {
  const std::size_t keys = static_cast<std::size_t>(sizes.keys);
  return AlignUp(sizeof(Header)) + AlignUp(sizeof(Key) * keys) +
         AlignUp(sizeof(Cell) * static_cast<std::size_t>(sizes.offers)) +
         4 * AlignUp(sizeof(int32_t) * keys) + sizeof(uint64_t) * keys;
}

FairOrder::Header& FairOrder::header() { return *reinterpret_cast<Header*>(this); }
const FairOrder::Header& FairOrder::header() const {
  return *reinterpret_cast<const Header*>(this);
}
FairOrder::Key* FairOrder::keys() {
  return reinterpret_cast<Key*>(reinterpret_cast<char*>(this) + AlignUp(sizeof(Header)));
}
const FairOrder::Key* FairOrder::keys() const {
  return reinterpret_cast<const Key*>(reinterpret_cast<const char*>(this) +
                                      AlignUp(sizeof(Header)));
}
FairOrder::Cell* FairOrder::cells() {
  return reinterpret_cast<Cell*>(
      reinterpret_cast<char*>(keys()) +
      AlignUp(sizeof(Key) * static_cast<std::size_t>(header().sizes.keys)));
}
const FairOrder::Cell* FairOrder::cells() const {
  return reinterpret_cast<const Cell*>(
      reinterpret_cast<const char*>(keys()) +
      AlignUp(sizeof(Key) * static_cast<std::size_t>(header().sizes.keys)));
}

int32_t* FairOrder::heap() {
  return reinterpret_cast<int32_t*>(
      reinterpret_cast<char*>(cells()) +
      AlignUp(sizeof(Cell) * static_cast<std::size_t>(header().sizes.offers)));
}
const int32_t* FairOrder::heap() const {
  return reinterpret_cast<const int32_t*>(
      reinterpret_cast<const char*>(cells()) +
      AlignUp(sizeof(Cell) * static_cast<std::size_t>(header().sizes.offers)));
}

int32_t* FairOrder::targets() {
  return heap() +
         AlignUp(sizeof(int32_t) * static_cast<std::size_t>(header().sizes.keys)) / sizeof(int32_t);
}
int32_t* FairOrder::skip_list() {
  return targets() +
         AlignUp(sizeof(int32_t) * static_cast<std::size_t>(header().sizes.keys)) / sizeof(int32_t);
}
int32_t* FairOrder::row_list() {
  return skip_list() +
         AlignUp(sizeof(int32_t) * static_cast<std::size_t>(header().sizes.keys)) / sizeof(int32_t);
}
uint64_t* FairOrder::scratch() {
  return reinterpret_cast<uint64_t*>(
      row_list() +
      AlignUp(sizeof(int32_t) * static_cast<std::size_t>(header().sizes.keys)) / sizeof(int32_t));
}

// The key starts skipping, or stops: the skipping list (the sweeps' keys
// to choose from) holds exactly the skipping keys' slots.
void FairOrder::StartSkipping(int32_t slot) {
  Header& h = header();
  Key& k = keys()[slot];
  k.skipping = true;
  k.skip_index = h.skipping;
  skip_list()[h.skipping++] = slot;
}
void FairOrder::StopSkipping(int32_t slot) {
  Unlist(skip_list(), &header().skipping, &Key::skip_index, slot);
  keys()[slot].skipping = false;
}

// Takes `slot` out of a list of slots (`list`, `size` of them) whose keys
// know their places in it (`index`): the last one takes its place.
void FairOrder::Unlist(int32_t* list, int32_t* size, int32_t Key::*index, int32_t slot) {
  Key* slots = keys();
  const int32_t at = slots[slot].*index;
  const int32_t last = list[--*size];
  list[at] = last;
  slots[last].*index = at;
  slots[slot].*index = -1;
}

FairOrder* FairOrder::Make(void* memory, const FairSizes& sizes) {
  FairOrder* order = static_cast<FairOrder*>(memory);
  Header& h = *new (memory) Header{};
  h.sizes = sizes;
  Key* key = order->keys();
  for (int32_t i = 0; i < sizes.keys; ++i) new (&key[i]) Key{};
  Cell* cell = order->cells();
  for (int32_t i = 0; i < sizes.offers; ++i)
    new (&cell[i]) Cell{0, 0, i + 1 < sizes.offers ? i + 1 : -1};
  h.free_head = sizes.offers > 0 ? 0 : -1;
  h.free_count = sizes.offers;
  return order;
}

int32_t FairOrder::FiledCount() const { return header().filed; }

int32_t FairOrder::Keys(KeyView* out, int32_t max) const {
  const Header& h = header();
  const Key* slots = keys();
  const Cell* all = cells();
  int32_t n = 0;
  for (int32_t i = 0; i < header().sizes.keys && n < max; ++i) {
    const Key& k = slots[i];
    if (!k.used) continue;
    const bool has_offer = k.head >= 0;
    out[n++] = KeyView{k.hash,
                       k.weight,
                       k.count + k.row_count,
                       k.skipping,
                       k.served,
                       has_offer ? all[k.head].place : k.mark,
                       has_offer || k.skipping,
                       k.row_count > 0                              ? all[k.row_head].id
                       : h.row_scan > 0 && k.row_scan == h.row_scan ? k.last_row
                                                                    : 0};
  }
  return n;
}
int32_t FairOrder::SkippingKeys() const { return header().skipping; }
int32_t FairOrder::KeysInUse() const { return header().keys_in_use; }
int32_t FairOrder::RowsFiled() const { return header().rows_filed; }
bool FairOrder::RowsNamed() const { return header().row_keys > 0; }
bool FairOrder::RowsRanDry() const { return header().rows_ran_dry; }

bool FairOrder::SweepWanted() const {
  const Header& h = header();
  if (h.skipping == 0 || !h.low_skipping) return false;
  // A batch's worth of room: a key's, or, when the cells ran out, a
  // quarter of them (each sweep reads from the least mark: it must file
  // enough to pay for that).
  const int32_t usable = h.free_count - h.sizes.reserve;
  const int32_t batch =
      h.pool_bound ? std::max<int32_t>(h.sizes.per_key, (h.sizes.offers - h.sizes.reserve) / 4)
                   : h.sizes.per_key / 2 + 1;
  return usable >= std::min(batch, h.sizes.offers - h.sizes.reserve);
}

// Linear probing over every slot; `make`: a free slot is taken for a key
// not found (-1 when none is left).
int32_t FairOrder::SlotOf(uint64_t key, bool make) {
  const int32_t slot = ProbeSlot(key, make);
  if (slot >= 0 || !make || header().keys_in_use < header().sizes.keys) return slot;
  // Full: the keys that only kept their slots for their buckets go first
  // (a full bucket is a new key's).
  Key* slots = keys();
  for (int32_t i = 0; i < header().sizes.keys;) {
    if (slots[i].used && Idle(i) && Ready(i)) {
      FreeSlot(i);  // slot i may now hold another key: looked at again
      continue;
    }
    ++i;
  }
  return ProbeSlot(key, make);
}

// A key with no offer that is not skipping (it keeps its slot only while
// its bucket is not full).
bool FairOrder::Idle(int32_t slot) const {
  const Key& k = keys()[slot];
  return k.count == 0 && k.row_count == 0 && !k.skipping && k.heap_index < 0;
}

// Whether the key may start a job now (its rate limit: one start every
// interval, a start not made never saved up: the generic cell rate
// algorithm with no burst).
bool FairOrder::Ready(int32_t slot) const {
  const Header& h = header();
  return h.interval <= 0 || keys()[slot].ready_at <= h.clock;
}

// Frees an idle key's slot unless its bucket still needs it, or the last
// scan of the rows named it (its filed rows ran out, the table may hold
// more: its F is kept until a scan finds none).
void FairOrder::FreeIfDone(int32_t slot) {
  const Header& h = header();
  const Key& k = keys()[slot];
  if (h.row_scan > 0 && k.row_scan >= h.rotation && k.row_scan > 0) return;
  if (Idle(slot) && Ready(slot)) FreeSlot(slot);
}

void FairOrder::SetClock(int64_t now_us, double rate) {
  Header& h = header();
  h.clock = now_us;
  h.interval = rate > 0 ? std::max<int64_t>(1, static_cast<int64_t>(1e6 / rate + 0.5)) : 0;
}

int32_t FairOrder::ProbeSlot(uint64_t key, bool make) {
  Header& h = header();
  Key* slots = keys();
  const int32_t n = h.sizes.keys;
  int32_t at = static_cast<int32_t>(key % static_cast<uint64_t>(n));
  for (int32_t probes = 0; probes < n; ++probes, at = at + 1 == n ? 0 : at + 1) {
    if (!slots[at].used) {
      if (!make) return -1;
      slots[at] = Key{};
      slots[at].used = true;
      slots[at].hash = key;
      slots[at].head = slots[at].tail = -1;
      slots[at].heap_index = -1;
      slots[at].skip_index = -1;
      slots[at].row_head = slots[at].row_tail = -1;
      slots[at].row_index = -1;
      slots[at].weight = 1;
      slots[at].ready_at = h.clock;
      ++h.keys_in_use;
      return at;
    }
    if (slots[at].hash == key) return at;
  }
  return -1;
}

// Backward-shift deletion: the keys after it in its probe run move up, so
// that a lookup never stops early at the hole.
void FairOrder::FreeSlot(int32_t slot) {
  Header& h = header();
  Key* slots = keys();
  int32_t* order = heap();
  const int32_t n = h.sizes.keys;
  if (slots[slot].row_index >= 0) RowUnlist(slot);
  slots[slot].used = false;
  --h.keys_in_use;
  int32_t hole = slot;
  for (int32_t at = hole + 1 == n ? 0 : hole + 1; slots[at].used; at = at + 1 == n ? 0 : at + 1) {
    const int32_t home = static_cast<int32_t>(slots[at].hash % static_cast<uint64_t>(n));
    // Stays if its home lies cyclically in (hole, at].
    const bool stays = hole < at ? (home > hole && home <= at) : (home > hole || home <= at);
    if (stays) continue;
    slots[hole] = slots[at];
    if (slots[hole].heap_index >= 0) order[slots[hole].heap_index] = hole;
    if (slots[hole].skipping) skip_list()[slots[hole].skip_index] = hole;
    if (slots[hole].row_index >= 0) row_list()[slots[hole].row_index] = hole;
    slots[at].used = false;
    hole = at;
  }
}

int32_t FairOrder::FindSlot(uint64_t key) const {
  const Header& h = header();
  const Key* slots = keys();
  const int32_t n = h.sizes.keys;
  int32_t at = static_cast<int32_t>(key % static_cast<uint64_t>(n));
  for (int32_t probes = 0; probes < n && slots[at].used; ++probes, at = at + 1 == n ? 0 : at + 1) {
    if (slots[at].hash == key) return at;
  }
  return -1;
}

bool FairOrder::Before(int32_t a, int32_t b) {
  const Key* slots = keys();
  if (slots[a].finish != slots[b].finish) return slots[a].finish < slots[b].finish;
  return slots[a].seq < slots[b].seq;
}

void FairOrder::HeapSiftUp(int32_t at) {
  int32_t* order = heap();
  Key* slots = keys();
  while (at > 0) {
    const int32_t parent = (at - 1) / 2;
    if (!Before(order[at], order[parent])) break;
    std::swap(order[at], order[parent]);
    slots[order[at]].heap_index = at;
    slots[order[parent]].heap_index = parent;
    at = parent;
  }
}

void FairOrder::HeapSiftDown(int32_t at) {
  int32_t* order = heap();
  Key* slots = keys();
  const int32_t size = header().heap_size;
  for (;;) {
    int32_t least = at;
    const int32_t left = 2 * at + 1, right = left + 1;
    if (left < size && Before(order[left], order[least])) least = left;
    if (right < size && Before(order[right], order[least])) least = right;
    if (least == at) break;
    std::swap(order[at], order[least]);
    slots[order[at]].heap_index = at;
    slots[order[least]].heap_index = least;
    at = least;
  }
}

void FairOrder::HeapPush(int32_t slot) {
  Header& h = header();
  Key& key = keys()[slot];
  key.seq = ++h.turns;
  const int32_t at = h.heap_size++;
  heap()[at] = slot;
  key.heap_index = at;
  HeapSiftUp(at);
}

int32_t FairOrder::HeapPop() {
  Header& h = header();
  int32_t* order = heap();
  Key* slots = keys();
  const int32_t top = order[0];
  slots[top].heap_index = -1;
  if (--h.heap_size > 0) {
    order[0] = order[h.heap_size];
    slots[order[0]].heap_index = 0;
    HeapSiftDown(0);
  }
  return top;
}

// Takes `slot` out of the heap wherever it is.
void FairOrder::HeapRemove(int32_t slot) {
  Header& h = header();
  int32_t* order = heap();
  Key* slots = keys();
  const int32_t at = slots[slot].heap_index;
  slots[slot].heap_index = -1;
  if (--h.heap_size == at) return;
  const int32_t moved = order[h.heap_size];
  order[at] = moved;
  slots[moved].heap_index = at;
  HeapSiftDown(at);
  HeapSiftUp(slots[moved].heap_index);
}

// A key that had no offer gets one: it starts no earlier than V.
void FairOrder::Activate(int32_t slot) {
  Key& key = keys()[slot];
  key.finish = std::max(key.finish, header().now);
  HeapPush(slot);
}

bool FairOrder::HasRoom(int32_t slot) const {
  const Header& h = header();
  return keys()[slot].count < h.sizes.per_key && h.free_count > h.sizes.reserve;
}

// Links a free cell (the caller saw one) holding `place` at the tail of the
// key's FIFO.
void FairOrder::Link(int32_t slot, uint32_t weight, FairPlace place, int64_t id) {
  Header& h = header();
  Key& key = keys()[slot];
  key.weight = std::clamp<uint32_t>(weight, 1, kMaxFairWeight);
  Cell* all = cells();
  const int32_t cell = h.free_head;
  h.free_head = all[cell].next;
  --h.free_count;
  all[cell] = Cell{place, id, -1};
  if (key.tail >= 0) {
    all[key.tail].next = cell;
  } else {
    key.head = cell;
  }
  key.tail = cell;
  ++key.count;
  ++h.filed;
  if (key.heap_index < 0) Activate(slot);
}

FairFiled FairOrder::File(uint64_t key, uint32_t weight, FairPlace place, int64_t id) {
  const int32_t slot = SlotOf(key, true);
  if (slot < 0) return FairFiled::kNoSlot;
  Key& k = keys()[slot];
  if (k.skipping) return FairFiled::kSkipped;
  if (!HasRoom(slot)) {
    // From here on its entries are the sweeps' to file, in order.
    Header& h = header();
    StartSkipping(slot);
    k.mark = place;
    if (k.count < h.sizes.per_key) h.pool_bound = true;
    if (k.count <= h.sizes.per_key / 2) h.low_skipping = true;
    return FairFiled::kSkipped;
  }
  Link(slot, weight, place, id);
  return FairFiled::kFiled;
}

FairFiled FairOrder::FileLate(uint64_t key, uint32_t weight, FairPlace place, int64_t id) {
  Header& h = header();
  const int32_t slot = SlotOf(key, true);
  if (slot < 0) return FairFiled::kNoSlot;
  Key& k = keys()[slot];
  // At or past a skipping key's mark, a sweep reads it (filing it here too
  // would file it twice); before the mark no sweep goes back to it.
  if (k.skipping && place >= k.mark) return FairFiled::kSkipped;
  if (h.free_count > 0) {
    Link(slot, weight, place, id);
    return FairFiled::kFiled;
  }
  // No cell at all: a key made for it and left empty goes again.
  FreeIfDone(slot);
  return FairFiled::kNoSlot;
}

std::optional<FairOrder::Taken> FairOrder::Take(bool (*eligible)(void*, uint64_t), void* context) {
  Header& h = header();
  Key* slots = keys();
  // The keys passed over, linked until one is chosen.
  int32_t parked = -1;
  int32_t chosen = -1;
  while (h.heap_size > 0) {
    const int32_t slot = HeapPop();
    if ((eligible == nullptr || eligible(context, slots[slot].hash)) && Ready(slot)) {
      chosen = slot;
      break;
    }
    slots[slot].next_parked = parked;
    parked = slot;
  }
  // V: the start of the turn served now; the start takes a token.
  if (chosen >= 0) {
    h.now = std::max(h.now, slots[chosen].finish);
    if (h.interval > 0) {
      slots[chosen].ready_at = std::max(slots[chosen].ready_at, h.clock) + h.interval;
    }
  }
  // A key passed over keeps its place in line, not credit: it is served
  // first once eligible, at V, as a key that became active then would be.
  // Back in the heap before TakeFrom may free a slot (which moves keys).
  while (parked >= 0) {
    const int32_t next = slots[parked].next_parked;
    const uint64_t seq = slots[parked].seq;
    slots[parked].finish = std::max(slots[parked].finish, h.now);
    HeapPush(parked);
    slots[parked].seq = seq;  // its place among equals kept
    HeapSiftUp(slots[parked].heap_index);
    parked = next;
  }
  if (chosen < 0) return std::nullopt;
  return TakeFrom(chosen);
}

FairOrder::Taken FairOrder::TakeFrom(int32_t chosen) {
  Header& h = header();
  Key& key = keys()[chosen];
  Cell* all = cells();
  const bool row = RowFirst(key);
  const int32_t cell = row ? key.row_head : key.head;
  const Taken taken{all[cell].place, key.hash, row};
  if (row) {
    key.last_row = all[cell].id;
    key.row_head = all[cell].next;
    if (--key.row_count == 0) {
      key.row_tail = -1;  // listed until a scan names it no more
      h.rows_ran_dry = true;
    }
    --h.rows_filed;
  } else {
    key.head = all[cell].next;
    if (key.head < 0) key.tail = -1;
    --key.count;
    --h.filed;
  }
  ++key.served;
  all[cell].next = h.free_head;
  h.free_head = cell;
  ++h.free_count;
  key.finish = h.now + kFairQuantum / key.weight;
  if (key.skipping && key.count <= h.sizes.per_key / 2) h.low_skipping = true;
  if (key.count > 0 || key.row_count > 0) {
    HeapPush(chosen);
  } else {
    FreeIfDone(chosen);
  }
  return taken;
}

// Whether the key's next job is its first row: the lower id of the two
// heads (a capped group's job let in from the table after its jobs still
// on the ring goes after them; a retry of its first job, before).
bool FairOrder::RowFirst(const Key& key) const {
  if (key.row_count == 0) return false;
  if (key.count == 0) return true;
  const Cell* all = cells();
  return all[key.row_head].id < all[key.head].id;
}

// The key's place in the row list goes (it holds no row).
void FairOrder::RowUnlist(int32_t slot) {
  Unlist(row_list(), &header().row_keys, &Key::row_index, slot);
}

// Drops the key's rows and its place in the row list (its slot, F and
// place in the heap stay: the caller decides).
void FairOrder::ClearRows(int32_t slot) {
  Header& h = header();
  Key& k = keys()[slot];
  if (k.row_count > 0) {
    Cell* all = cells();
    all[k.row_tail].next = h.free_head;
    h.free_head = k.row_head;
    h.free_count += k.row_count;
    h.rows_filed -= k.row_count;
    k.row_head = k.row_tail = -1;
    k.row_count = 0;
  }
  if (k.row_index >= 0) RowUnlist(slot);
}

void FairOrder::BeginRows(bool from_first) {
  Header& h = header();
  ++h.row_scan;
  h.from_first = from_first;
  h.rows_ran_dry = false;
  if (from_first) h.rotation = h.row_scan;
}

FairFiled FairOrder::FileRow(uint64_t key, uint32_t weight, int64_t row) {
  Header& h = header();
  const int32_t slot = SlotOf(key, true);
  if (slot < 0) return FairFiled::kNoSlot;
  Key& k = keys()[slot];
  // A scan that goes on after an earlier one's cut files no key that one
  // named: its first due rows lay before the cut.
  if (!h.from_first && k.row_scan >= h.rotation && k.row_scan != h.row_scan && k.row_scan > 0) {
    return FairFiled::kSkipped;
  }
  // The first of this scan: what an earlier one filed goes (it may have
  // been claimed since; the scan found what is due now).
  if (k.row_scan != h.row_scan) ClearRows(slot);
  const int32_t budget = std::max<int32_t>(1, (h.sizes.offers - h.sizes.reserve) / 4);
  if (k.row_count >= h.sizes.per_key || h.rows_filed >= budget || h.free_count <= h.sizes.reserve) {
    // (In the heap only while it holds something.)
    if (k.count == 0 && k.row_count == 0 && k.heap_index >= 0) HeapRemove(slot);
    FreeIfDone(slot);
    return FairFiled::kSkipped;
  }
  k.row_scan = h.row_scan;  // named: its slot kept until a scan names it no more
  k.weight = std::clamp<uint32_t>(weight, 1, kMaxFairWeight);
  Cell* all = cells();
  const int32_t cell = h.free_head;
  h.free_head = all[cell].next;
  --h.free_count;
  all[cell] = Cell{static_cast<FairPlace>(row), row, -1};
  if (k.row_tail >= 0) {
    all[k.row_tail].next = cell;
  } else {
    k.row_head = cell;
  }
  if (k.row_index < 0) {
    k.row_index = h.row_keys;
    row_list()[h.row_keys++] = slot;
  }
  k.row_tail = cell;
  ++k.row_count;
  ++h.rows_filed;
  if (k.heap_index < 0) Activate(slot);
  return FairFiled::kFiled;
}

void FairOrder::EndRows(bool complete) {
  Header& h = header();
  // A scan that read only part of the due rows says nothing of the keys it
  // did not name.
  if (!complete) return;
  Key* slots = keys();
  // The keys this scan did not file: their rows go (found again by their
  // keys: a freed slot moves keys of its probe run).
  uint64_t* stale = scratch();
  int32_t stale_count = 0;
  const int32_t* list = row_list();
  for (int32_t r = 0; r < h.row_keys; ++r) {
    const Key& k = slots[list[r]];
    if (k.row_scan != h.row_scan) stale[stale_count++] = k.hash;
  }
  for (int32_t e = 0; e < stale_count; ++e) {
    const int32_t slot = FindSlot(stale[e]);
    if (slot < 0) continue;
    ClearRows(slot);
    if (slots[slot].count == 0 && slots[slot].heap_index >= 0) HeapRemove(slot);
    FreeIfDone(slot);
  }
}

void FairOrder::Reweigh(uint32_t (*weight_of)(void*, uint64_t), void* context) {
  Key* slots = keys();
  for (int32_t i = 0; i < header().sizes.keys; ++i) {
    if (slots[i].used) {
      slots[i].weight = std::clamp<uint32_t>(weight_of(context, slots[i].hash), 1, kMaxFairWeight);
    }
  }
}

bool FairOrder::Skipping(uint64_t key) const {
  const int32_t slot = FindSlot(key);
  return slot >= 0 && keys()[slot].skipping;
}

std::optional<FairOrder::Taken> FairOrder::Next() const {
  const Header& h = header();
  if (h.heap_size == 0) return std::nullopt;
  const Key& key = keys()[heap()[0]];
  if (RowFirst(key)) return Taken{cells()[key.row_head].place, key.hash, true};
  return Taken{cells()[key.head].place, key.hash};
}

FairFiled FairOrder::Remove(uint64_t key, FairPlace place) {
  Header& h = header();
  const int32_t slot = FindSlot(key);
  if (slot < 0) return FairFiled::kIgnored;
  Key& k = keys()[slot];
  Cell* all = cells();
  for (int32_t cell = k.head, before = -1; cell >= 0; before = cell, cell = all[cell].next) {
    if (all[cell].place != place) continue;
    const int32_t next = all[cell].next;
    if (before >= 0) {
      all[before].next = next;
    } else {
      k.head = next;
    }
    if (k.tail == cell) k.tail = before;
    all[cell].next = h.free_head;
    h.free_head = cell;
    ++h.free_count;
    --k.count;
    --h.filed;
    if (k.skipping && k.count <= h.sizes.per_key / 2) h.low_skipping = true;
    if (k.count == 0 && k.row_count == 0) {
      HeapRemove(slot);
      FreeIfDone(slot);
    }
    return FairFiled::kFiled;
  }
  return k.skipping && place >= k.mark ? FairFiled::kSkipped : FairFiled::kIgnored;
}

std::optional<FairPlace> FairOrder::Least() const {
  const Header& h = header();
  const Key* slots = keys();
  const Cell* all = cells();
  std::optional<FairPlace> least;
  auto see = [&](FairPlace place) {
    if (!least || place < *least) least = place;
  };
  for (int32_t i = 0; i < h.sizes.keys; ++i) {
    const Key& k = slots[i];
    if (!k.used) continue;
    // (A FIFO is in ring order but for late entries: every offer looked at.)
    for (int32_t cell = k.head; cell >= 0; cell = all[cell].next) see(all[cell].place);
    if (k.skipping) see(k.mark);
  }
  return least;
}

void FairOrder::Rebase(FairPlace delta) {
  Header& h = header();
  Key* slots = keys();
  Cell* all = cells();
  for (int32_t i = 0; i < h.sizes.keys; ++i) {
    Key& k = slots[i];
    if (!k.used) continue;
    for (int32_t cell = k.head; cell >= 0; cell = all[cell].next) all[cell].place -= delta;
    if (k.skipping) k.mark -= delta;
  }
}

std::optional<FairPlace> FairOrder::BeginSweep() {
  Header& h = header();
  Key* slots = keys();
  int32_t* order = targets();
  // The keys down to half their room (none low: every skipping key with
  // room, as when nothing else is left to take).
  h.targets = 0;
  const int32_t* list = skip_list();
  for (int pass = 0; pass < 2 && h.targets == 0; ++pass) {
    for (int32_t s = 0; s < h.skipping; ++s) {
      const Key& k = slots[list[s]];
      if (pass == 0 ? k.count <= h.sizes.per_key / 2 : k.count < h.sizes.per_key) {
        order[h.targets++] = list[s];
      }
    }
  }
  std::sort(order, order + h.targets,
            [&](int32_t a, int32_t b) { return slots[a].mark < slots[b].mark; });
  for (int32_t t = 0; t < h.targets; ++t) slots[order[t]].target = true;
  h.next_target = 0;
  h.active = 0;
  if (h.targets == 0) return std::nullopt;
  return slots[order[0]].mark;
}

FairFiled FairOrder::Sweep(uint64_t key, uint32_t weight, FairPlace place, int64_t id) {
  Header& h = header();
  const int32_t slot = SlotOf(key, false);
  if (slot < 0) return FairFiled::kIgnored;  // not skipping: every entry of it was filed
  Key& k = keys()[slot];
  if (!k.target || place < k.mark) return FairFiled::kIgnored;
  // Read on from its mark without a gap (SweepNext jumps only to a mark,
  // and never while a key reads on).
  if (!k.active) {
    k.active = true;
    ++h.active;
  }
  if (!HasRoom(slot)) {
    // Its first entry not filed: the next sweep starts there.
    k.mark = place;
    k.target = k.active = false;
    --h.active;
    return FairFiled::kSkipped;
  }
  Link(slot, weight, place, id);
  k.mark = place + 1;
  return FairFiled::kFiled;
}

bool FairOrder::Pass(uint64_t key, FairPlace place) {
  Header& h = header();
  const int32_t slot = FindSlot(key);
  if (slot < 0) return false;
  Key& k = keys()[slot];
  if (!k.target || place < k.mark) return false;
  if (!k.active) {
    k.active = true;
    ++h.active;
  }
  k.mark = place + 1;  // it takes no room
  return true;
}

std::optional<FairPlace> FairOrder::SweepNext(FairPlace place) {
  Header& h = header();
  if (h.free_count <= h.sizes.reserve) return std::nullopt;  // nothing more can be filed
  Key* slots = keys();
  const int32_t* order = targets();
  // A key whose mark the sweep has reached reads on from it (whether or not
  // an entry of it came yet): no jump until it is full.
  for (; h.next_target < h.targets && slots[order[h.next_target]].mark <= place; ++h.next_target) {
    Key& k = slots[order[h.next_target]];
    if (k.target && !k.active) {
      k.active = true;
      ++h.active;
    }
  }
  if (h.active > 0) return place + 1;
  // Nobody reading on: to the next target's mark, over what none needs.
  while (h.next_target < h.targets && !slots[order[h.next_target]].target) ++h.next_target;
  if (h.next_target == h.targets) return std::nullopt;
  return std::max(place + 1, slots[order[h.next_target]].mark);
}

void FairOrder::EndSweep(FairPlace reached, bool at_cursor) {
  Header& h = header();
  Key* slots = keys();
  const int32_t* order = targets();
  uint64_t* emptied = scratch();
  int32_t emptied_count = 0;
  for (int32_t t = 0; t < h.targets; ++t) {
    Key& k = slots[order[t]];
    if (k.target && at_cursor) {
      // Not full: every entry of it from its mark to the cursor was read
      // and filed (the sweep reads on from each mark it reaches, and jumps
      // only to marks), none if its mark is the cursor: the cursor files
      // the rest.
      k.mark = reached;
      StopSkipping(order[t]);
      if (k.count == 0 && k.heap_index < 0) emptied[emptied_count++] = k.hash;
    } else if (k.target && k.active) {
      // Stopped on the way: filed up to `reached`, the next sweep goes on there.
      k.mark = std::max(k.mark, reached);
    }
    k.target = k.active = false;
  }
  h.targets = h.active = h.next_target = 0;
  h.low_skipping = h.pool_bound = false;
  const int32_t* list = skip_list();
  for (int32_t s = 0; s < h.skipping; ++s) {
    const Key& k = slots[list[s]];
    if (k.count <= h.sizes.per_key / 2) h.low_skipping = true;
    if (k.count < h.sizes.per_key) h.pool_bound = true;
  }
  // Emptied keys that stopped skipping give their slots back (found again
  // by their keys: a freed slot moves keys of its probe run).
  for (int32_t e = 0; e < emptied_count; ++e) {
    const int32_t slot = FindSlot(emptied[e]);
    if (slot >= 0) FreeIfDone(slot);
  }
}

}  // namespace pgq::core
