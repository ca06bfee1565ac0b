// The maintenance pass, shared by pgq.maintain() and the maintenance worker.
#pragma once

#include "pg/pg.h"

namespace pgq::service {

struct PassCounts {
  int64 expired_requeued = 0;
  int64 expired_dead = 0;
  int64 finished_dropped = 0;
  int64 schedules_fired = 0;

  bool DidWork() const {
    return expired_requeued + expired_dead + finished_dropped + schedules_fired > 0;
  }
  PassCounts& operator+=(const PassCounts& other) {
    expired_requeued += other.expired_requeued;
    expired_dead += other.expired_dead;
    finished_dropped += other.finished_dropped;
    schedules_fired += other.schedules_fired;
    return *this;
  }
};

// One bounded batch of every step of the pass, as of `now`, in the current
// transaction. Sets *more when a step filled its batch: the pass is not done.
// pgq.maintain() runs batches until done in its caller's transaction; the
// worker commits after each one, so no transaction grows with the backlog.
PassCounts RunMaintenanceBatch(TimestampTz now, bool* more);

}  // namespace pgq::service
