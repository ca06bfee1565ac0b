// The read surfaces (3.0, issue 31): what a role may read about its own
// queues, and the coordination readers. Each returns its rows in the order
// of the SQL function's result columns (api/read_surfaces.cpp copies them
// into the result set as they are); the caller has checked the rights and
// says which queues with `scope`.
#pragma once

#include <optional>
#include <string_view>
#include <vector>

#include "pg/job_ring.h"
#include "pg/spi.h"
#include "store/jobs.h"

namespace pgq::store {

// pgq.queue_settings' rows: the queues of `scope`, or only `queue_id`.
pg::Result ReadQueueSettings(pg::SpiSession& spi, const Scope& scope,
                             std::optional<int32> queue_id);
// pgq.queue_workers' rows: one per queue and claiming session, leases that
// ran out by `now` counted.
pg::Result ReadQueueWorkers(pg::SpiSession& spi, const Scope& scope, std::optional<int32> queue_id,
                            TimestampTz now);
// The running jobs of the queues' rings in `scope` (or only `queue_id`),
// from the lease map (pg/job_ring.h RunningJobs): read by queue_workers and
// by pgq.ring_running_jobs() for the view pgq.running_jobs.
std::vector<pg::job_ring::RunningJob> RingRunningJobs(pg::SpiSession& spi, const Scope& scope,
                                                      std::optional<int32> queue_id);
// pgq.list_schedule_runs' rows: up to `max`, newest first, of one schedule
// or all.
pg::Result ReadScheduleRuns(pg::SpiSession& spi, const Scope& scope, std::optional<int32> queue_id,
                            std::optional<std::string_view> schedule, int32 max);
// pgq.list_teams', list_switches' and list_ladders' rows: up to `max`, of
// the one named or all.
pg::Result ReadTeams(pg::SpiSession& spi, std::optional<std::string_view> team, int32 max);
pg::Result ReadSwitches(pg::SpiSession& spi, std::optional<std::string_view> name, int32 max);
pg::Result ReadLadders(pg::SpiSession& spi, std::optional<std::string_view> subject, int32 max);

}  // namespace pgq::store
