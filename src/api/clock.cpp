// pgq.clock(): the time pgq_cpp goes by (pg/settings.h, Now()): wall-clock
// time shifted by pgq.debug_clock_offset, which lets tests expire leases and
// fire schedules without sleeping.
#include "pg/boundary.h"
#include "pg/settings.h"

using namespace pgq;

PGQ_FUNCTION(pgq_clock) { PG_RETURN_TIMESTAMPTZ(pg::Now()); }
