// The one way C++ in src/pg, src/api and src/bgw includes PostgreSQL.
//
// Order matters: standard and Boost headers first, then PostgreSQL's inside
// extern "C", then undo the printf-family macros that port.h defines, which
// would otherwise rename std::snprintf and friends in later headers.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <exception>
#include <new>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

extern "C" {
#include "postgres.h"

#include "access/xact.h"
#include "catalog/pg_type.h"
#include "common/pg_prng.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "storage/lock.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/jsonb.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"
}

#undef snprintf
#undef vsnprintf
#undef sprintf
#undef vsprintf
#undef fprintf
#undef vfprintf
#undef printf
#undef vprintf
#undef strerror
#undef strerror_r
