// One try of a claim (pgq.claim's and the handler workers'): each queue as
// committed now, the consume right, the rate limit, then the jobs store's
// statement (store/claim.cpp).
#include <algorithm>
#include <optional>

#include "service/claim.h"

#include "pg/args.h"
#include "pg/queue_lock.h"
#include "pg/queue_slots.h"
#include "pg/settings.h"
#include "service/queue_ref.h"
#include "service/rate_limit.h"
#include "service/rights.h"
#include "store/jobs.h"
#include "store/ring_jobs.h"

namespace pgq::service {

namespace {

// A waiting claim is woken by the commits that make jobs of its queue ready
// (pg/channel_wait.h). Jobs that become due without a commit (a future run_at, a
// retry's backoff) are found by looking again when the claim hint's alarm
// says the first of them is due; an empty rate limit's next token when it
// comes; anything else at least every pgq.wait_recheck (pg/settings.h).
// The shortest sleep until a job the claim hint's alarm knows becomes due
// (pgq.wait_recheck is never shorter).
constexpr long kAlarmFloorMillis = 10;

}  // namespace

uint64 Claimer::Try::size() const {
  uint64 total = 0;
  for (const pg::Result& rows : jobs) total += rows.size();
  return total;
}

Claimer::Claimer(pg::SpiSession& spi, std::vector<std::string_view> queues, int32 n, Datum lease)
    : spi_(spi), names_(std::move(queues)), n_(n), lease_(lease) {
  for (std::string_view name : names_) name_datums_.push_back(pg::TextDatum(name));
}

int32 Claimer::ClaimRingQueue(const pg::CachedQueue& queue, size_t index, int32 want, Datum lease,
                              TimestampTz now, pg::QueueSlot* slot, Try* result) {
  // A queue on a ring (ADR 0028, step 2a): the due jobs of pgq.job_rows and the
  // ring's. A cap counts both, and both claims are made under its lock, as
  // one capped claim of pgq.job_rows counts and claims (store/claim.cpp): a
  // claim may take fewer than there is room for, never more.
  const bool capped = queue.max_running > 0;
  if (capped) {
    pg::LockQueueCap(queue.id);
    const int64 running = store::CountRunning(queue.id, queue.max_running) +
                          store::ring::RunningCount(spi_, queue.id);
    want = static_cast<int32>(std::clamp<int64>(queue.max_running - running, 0, want));
    if (slot != nullptr) pg::SetQueueCapped(slot, true);
  }
  // pgq.job_rows and the rings (one a priority served on rings) merged in
  // claim order (SPEC: priority, run_at, id): each round takes, from the
  // side whose next job comes first, the jobs that come before the next job
  // of any other side (all of a ring's when the others' next is of a lower
  // priority). A queue whose pgq.job_rows has nothing due claims from its
  // rings alone, highest priority first, after one claim of pgq.job_rows
  // that keeps its claim hint and alarm (none at all when the hint says
  // nothing is pending there).
  const std::vector<store::ring::QueueRing> rings = store::ring::RingsOf(spi_, queue.id);
  std::vector<char> ring_done(rings.size(), 0);
  // The due rows of pgq.job_rows a claim takes go onto their priority's
  // ring as they are taken (ADR 0028 "Rows claimed onto the rings"). (The
  // claim that PeekReady found nothing due for takes none: it is made to
  // keep the claim hint and its alarm.)
  std::vector<int32> onto;
  if (pg::job_ring::Available() && pg::ClaimRowsOntoRings()) {
    for (const store::ring::QueueRing& ring : rings) onto.push_back(ring.priority);
  }
  const std::vector<int32>* onto_rings = onto.empty() ? nullptr : &onto;
  int32 got = 0;
  bool table_done = false;
  auto add = [&](pg::Result rows) {
    const int32 count = static_cast<int32>(rows.size());
    if (count > 0) result->jobs.push_back(std::move(rows));
    got += count;
    return count;
  };
  auto claim_ring = [&](size_t i, const pg::job_ring::Bound* before) {
    return add(store::ring::Claim(spi_, queue.id, rings[i].ring_id, name_datums_[index], want - got,
                                  lease, now, before));
  };
  // A fair ring's claim: its turns of due rows (ids) claimed after it. A
  // turn whose row is gone or locked (a claim in flight when the table was
  // scanned took it) is lost: the next turns are asked for, a few times.
  auto claim_fair_ring = [&](size_t i) {
    for (int tries = 0; tries < 4 && got < want; ++tries) {
      std::vector<pg::job_ring::RowTurn> rows;
      add(store::ring::Claim(spi_, queue.id, rings[i].ring_id, name_datums_[index], want - got,
                             lease, now, nullptr, &rows));
      // A grouped row stays a row (store/claim.cpp ClaimOntoRingSql):
      // claimed in place by the plain statement; the others may go onto
      // the ring.
      std::vector<int64> grouped, plain;
      for (const pg::job_ring::RowTurn& row : rows)
        (row.grouped ? grouped : plain).push_back(row.id);
      const int32 from_rows = add(store::ClaimRowIds(spi_, queue.id, name_datums_[index], grouped,
                                                     lease, now, nullptr)) +
                              add(store::ClaimRowIds(spi_, queue.id, name_datums_[index], plain,
                                                     lease, now, onto_rings));
      if (static_cast<size_t>(from_rows) == rows.size()) break;  // every turn served
    }
  };
  if (!rings.empty() && rings.front().fair) {
    // A fair queue (ADR 0029): each ring hands out in fair order, which is
    // no claim order to merge by. The due rows of pgq.job_rows (retries,
    // scheduled jobs, a capped group's jobs let in) of a priority above a
    // ring's go before its entries; those of its own priority take their
    // keys' turns in the ring's fair order (FileDueRows): a capped tenant
    // whose every job comes from the table is served in its turn, as any
    // key. (The table is scanned only when the index says a row is due:
    // the claim hint may say "pending" for rows due later.) What the order
    // cannot give (rows due since its last scan, turns whose row was taken
    // meanwhile) is looked for last, in claim order.
    bool pending = false, plain = false;
    const std::optional<core::ClaimKey> table =
        store::PeekReady(queue.id, slot, now, &pending, &plain);
    for (size_t i = 0; i < rings.size() && got < want; ++i) {
      if (table && table->priority > rings[i].priority) {
        const core::ClaimKey above{rings[i].priority + 1, DT_NOEND, PG_INT64_MAX};
        add(store::ClaimBefore(spi_, queue.id, name_datums_[index], want - got, lease, now, slot,
                               &above, plain ? onto_rings : nullptr));
      }
      if (got < want) {
        store::ring::FileDueRows(spi_, queue.id, rings[i].ring_id, rings[i].priority,
                                 std::max(now, pg::Now()),
                                 table && table->priority >= rings[i].priority);
      }
      if (got < want) claim_fair_ring(i);
    }
    // The rest of them, unbounded (one that finds none says so to the hint).
    if (got < want && (table || pending)) {
      add(store::ClaimBefore(spi_, queue.id, name_datums_[index], want - got, lease, now, slot,
                             nullptr, plain ? onto_rings : nullptr));
    }
    table_done = true;
  }
  while (!table_done && got < want) {
    bool pending = false, plain = false;
    const std::optional<core::ClaimKey> table =
        table_done ? std::nullopt : store::PeekReady(queue.id, slot, now, &pending, &plain);
    if (!table) {
      if (!table_done && pending) {
        add(store::ClaimBefore(spi_, queue.id, name_datums_[index], want - got, lease, now, slot,
                               nullptr));
      }
      table_done = true;
      for (size_t i = 0; i < rings.size() && got < want; ++i) {
        if (!ring_done[i]) claim_ring(i, nullptr);
      }
      break;
    }
    // The rings' next keys: the first of them, and the first after it.
    std::optional<size_t> first;
    std::optional<core::ClaimKey> first_key, second_key;
    for (size_t i = 0; i < rings.size(); ++i) {
      core::ClaimKey key{};
      if (ring_done[i] || store::ring::Peek(spi_, queue.id, rings[i].ring_id, &key, 1) == 0) {
        ring_done[i] = 1;
        continue;
      }
      if (!first_key || core::ClaimsBefore(key, *first_key)) {
        second_key = first_key;
        first_key = key;
        first = i;
      } else if (!second_key || core::ClaimsBefore(key, *second_key)) {
        second_key = key;
      }
    }
    if (!first || core::ClaimsBefore(*table, *first_key)) {
      // pgq.job_rows' jobs that come before the rings' next entry; onto
      // the rings when the first of them may go (a grouped job or one with
      // progress stays a row: the plain statement costs less for those).
      if (add(store::ClaimBefore(spi_, queue.id, name_datums_[index], want - got, lease, now, slot,
                                 first_key ? &*first_key : nullptr,
                                 plain ? onto_rings : nullptr)) == 0) {
        table_done = true;  // its next job was taken or locked meanwhile
      }
      continue;
    }
    // The ring's entries that come before the other sides' next job (all of
    // them when that job's priority is lower).
    const core::ClaimKey next =
        second_key && core::ClaimsBefore(*second_key, *table) ? *second_key : *table;
    const pg::job_ring::Bound bound{next.run_at, next.id};
    if (claim_ring(*first, next.priority == first_key->priority ? &bound : nullptr) == 0) {
      ring_done[*first] = 1;
    }
  }
  if (capped && slot != nullptr) pg::SetQueueCapped(slot, true);
  if (capped) pg::UnlockQueueCap(queue.id);
  return got;
}

long Claimer::ClaimFrom(const pg::CachedQueue& queue, size_t index, int32 n, TimestampTz now,
                        bool waiting, Try* result) {
  pg::QueueSlot* slot = pg::FindQueueSlot(queue.id);
  std::optional<RateBucket> bucket;
  int32 want = n;
  if (queue.rate_limit > 0) {
    bucket.emplace(spi_, queue.id, queue.rate_limit, slot);
    want = bucket->Take(n, now);
    // No token: sleep until the next one rather than a full recheck.
    if (want == 0) {
      return std::max(1L, static_cast<long>((bucket->MicrosUntilToken() + 999) / 1000));
    }
  }
  // A waiting claim reads the hint's alarm before the scan too: a hint
  // reset (a maintenance pass's, once a minute) that lands while the scan
  // runs drops the alarm and what the scan would have published, and the
  // claim would sleep a whole pgq.wait_recheck past a job due sooner.
  const int64 due_before = waiting && slot != nullptr ? pg::NextAlarm(slot) : 0;
  const Datum lease = lease_ != 0 ? lease_ : IntervalPGetDatum(&queue.lease);
  int32 got = 0;
  if (queue.ring_id == 0) {
    pg::Result jobs = store::Claim(spi_, queue.id, name_datums_[index], want, lease, now, slot,
                                   queue.max_running);
    got = static_cast<int32>(jobs.size());
    if (!jobs.empty()) result->jobs.push_back(std::move(jobs));
  } else {
    got = ClaimRingQueue(queue, index, want, lease, now, slot, result);
  }
  if (bucket) bucket->Return(want - got);
  const long recheck = pg::WaitRecheckMillis();
  if (got > 0) return recheck;
  // Nothing ready: a job the hint knows will be due sooner than the next
  // recheck (a future run_at, a retry's backoff) is looked for then (not
  // sooner than kAlarmFloorMillis: an alarm already due that this try could
  // not settle is not polled in a loop). An alarm read before the scan and
  // due after `now` was not consumed by this try's scan: its job is still to
  // come.
  int64 due = slot != nullptr ? pg::NextAlarm(slot) : 0;
  if (due_before > now && (due == 0 || due_before < due)) due = due_before;
  if (due == 0) return recheck;
  return std::clamp<long>(static_cast<long>((due - now + 999) / 1000), kAlarmFloorMillis, recheck);
}

Claimer::Try Claimer::Once(pg::ChannelWaiter* waiter) {
  std::vector<pg::CachedQueue> queues;
  queues.reserve(names_.size());
  for (std::string_view name : names_) {
    queues.push_back(CurrentQueue(spi_, name));
    RequireRight(spi_, queues.back().id, name, core::kConsume);
  }
  if (waiter != nullptr) {
    // The queues' current ids: one dropped and created again under the same
    // name has a new one.
    std::vector<int32> ids;
    for (const pg::CachedQueue& queue : queues) ids.push_back(queue.id);
    waiter->Arm(pg::Channel::Queues(ids.data(), static_cast<int>(ids.size())));
  }
  Try result{{}, pg::WaitRecheckMillis()};
  const TimestampTz now = pg::Now();
  const bool waiting = waiter != nullptr;
  if (queues.size() == 1) {
    if (!queues[0].paused) result.sleep_cap_ms = ClaimFrom(queues[0], 0, n_, now, waiting, &result);
    return result;
  }
  // Several queues: where the next n jobs are, then that many from each. A
  // queue that gives fewer than asked (its rate limit or cap, or others
  // took them) is left out of the next round, which looks for the rest.
  std::vector<bool> done(queues.size(), false);
  for (size_t i = 0; i < queues.size(); ++i) done[i] = queues[i].paused;
  for (size_t round = 0; round < queues.size(); ++round) {
    const int32 want = n_ - static_cast<int32>(result.size());
    std::vector<store::SpreadQueue> spread;
    for (size_t i = 0; i < queues.size(); ++i) {
      spread.push_back(done[i] ? store::SpreadQueue{0, nullptr}
                               : store::SpreadQueue{queues[i].id, pg::FindQueueSlot(queues[i].id)});
      if (done[i] || queues[i].ring_id == 0) continue;
      // A ring queue's next entries take part in the spread (the index's
      // key negates the priority).
      std::vector<core::ClaimKey> keys(static_cast<size_t>(want));
      keys.resize(static_cast<size_t>(store::ring::Peek(spi_, queues[i].id, keys.data(), want)));
      for (const core::ClaimKey& key : keys) {
        spread.back().ring_keys.push_back(pg::OrderKey{-key.priority, key.run_at, key.id});
      }
    }
    const std::vector<int32> counts = store::SpreadClaim(spread, want, now);
    bool short_of = false;
    for (size_t i = 0; i < queues.size(); ++i) {
      if (counts[i] == 0) continue;
      const uint64 before = result.size();
      result.sleep_cap_ms =
          std::min(result.sleep_cap_ms, ClaimFrom(queues[i], i, counts[i], now, waiting, &result));
      if (result.size() - before < static_cast<uint64>(counts[i])) {
        done[i] = true;
        short_of = true;
      }
    }
    if (!short_of || static_cast<int32>(result.size()) >= n_) break;
  }
  // Queues on rings (ADR 0028 step 2a): the spread above counts their
  // rings' next entries too; what is still wanted (a ring queue that gave
  // fewer than it was counted for) is asked of their rings, in the order
  // given.
  for (size_t i = 0; i < queues.size() && static_cast<int32>(result.size()) < n_; ++i) {
    if (queues[i].ring_id == 0 || queues[i].paused) continue;
    result.sleep_cap_ms = std::min(
        result.sleep_cap_ms,
        ClaimFrom(queues[i], i, n_ - static_cast<int32>(result.size()), now, waiting, &result));
  }
  return result;
}

}  // namespace pgq::service
