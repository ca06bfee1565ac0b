// A claim's wait (pgq.claim(..., wait => ...)) on a monotonic clock, in
// microseconds. Pure C++: the caller reads the clock and passes it in.
//
// Monotonic, not the wall clock: a wall clock stepped back (NTP, a VM
// restored from a snapshot) must neither stretch a wait nor end it early.
#pragma once

#include <cstdint>

namespace pgq::core {

// The end of a wait of `wait_us` (>= 0) starting at `now_us`; saturates
// instead of overflowing.
int64_t WaitEnd(int64_t now_us, int64_t wait_us);

// Whole milliseconds left until `end_us`, rounded up so that the last sleep
// does not end just before it; 0 once it has passed.
int64_t MillisLeft(int64_t end_us, int64_t now_us);

}  // namespace pgq::core
