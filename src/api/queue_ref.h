// Looking a queue up by name, shared by every function that takes one.
#pragma once

#include "pg/spi.h"

namespace pgq::api {

struct QueueRef {
  int32 id;
  int32 max_attempts;
  bool notify;
};

// The queue named `name`, or undefined_object with a hint.
QueueRef FindQueue(pg::SpiSession& spi, std::string_view name);
// The same, given `name` already as a text Datum (allocates nothing).
QueueRef FindQueue(pg::SpiSession& spi, std::string_view name, Datum name_text);

// Raises undefined_object for `name`.
[[noreturn]] void RaiseUnknownQueue(std::string_view name);

}  // namespace pgq::api
