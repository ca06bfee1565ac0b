// A claimed job's lease as pgq-worker and pgq-relay keep it: what
// pgq.extend renews it with, how long it runs, when to extend it.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace pgq::cli {

struct Lease {
  std::string text;  // pgq.extend's interval
  std::chrono::steady_clock::duration length{};
  std::chrono::steady_clock::duration half{};  // the heartbeat's period
};

// A lease shorter than this would have the client do nothing but extend.
inline constexpr double kMinLeaseSeconds = 0.2;

// option: --lease (empty: the queue's), option_seconds what the server read
// in it; claim_seconds: the claim's lease_until - pgq.clock() as the server
// sent it, which is the queue's lease without needing its settings or a
// synchronised clock.
inline Lease LeaseOf(const std::string& option, double option_seconds, const char* claim_seconds) {
  Lease lease;
  double seconds = option_seconds;
  if (option.empty()) {
    seconds = std::max(kMinLeaseSeconds, std::strtod(claim_seconds, nullptr));
    char text[64];
    std::snprintf(text, sizeof text, "%.3f seconds", seconds);
    lease.text = text;
  } else {
    lease.text = option;
  }
  lease.length = std::chrono::duration_cast<std::chrono::steady_clock::duration>(
      std::chrono::duration<double>(std::max(kMinLeaseSeconds, seconds)));
  lease.half = lease.length / 2;
  return lease;
}

}  // namespace pgq::cli
