// Extension versions ("2.0.1", "2.1"), compared as PostgreSQL's update
// chain orders them. Pure C++: no PostgreSQL headers.
#pragma once

#include <string_view>

namespace pgq::core {

// <0, 0 or >0 as version a is older than, the same as or newer than b,
// compared number by number ("2.0.1" < "2.1" < "2.10"; a missing number is
// 0: "2.1" == "2.1.0"). Text that is not numbers and dots compares as
// bytes after the numbers it starts with, so it is never equal to a
// release's version unless it is the same text.
int CompareVersions(std::string_view a, std::string_view b);

}  // namespace pgq::core
