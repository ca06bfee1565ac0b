#include "pg/args.h"

#include <cctype>

#include <algorithm>

#include "core/validate.h"
#include "pg/settings.h"

extern "C" {
#include "access/detoast.h"
#include "catalog/pg_type.h"
#include "utils/array.h"
#include "mb/pg_wchar.h"
#include "utils/acl.h"
}

namespace pgq::pg {

namespace {

[[noreturn]] void RaiseNull(const char* what) {
  Raise(ERRCODE_NULL_VALUE_NOT_ALLOWED, std::string(what) + " must not be null");
}

}  // namespace

bool ArgIsNull(FunctionCallInfo fcinfo, int index) {
  return index >= PG_NARGS() || PG_ARGISNULL(index);
}

std::string_view RequiredText(FunctionCallInfo fcinfo, int index, const char* what) {
  if (ArgIsNull(fcinfo, index)) RaiseNull(what);
  text* value = Guard([&] { return PG_GETARG_TEXT_PP(index); });
  return std::string_view(VARDATA_ANY(value), VARSIZE_ANY_EXHDR(value));
}

std::string_view QueueNameArg(FunctionCallInfo fcinfo, int index) {
  const std::string_view name = RequiredText(fcinfo, index, "queue name");
  if (!core::IsValidQueueName(name)) {
    const std::string shown(name.substr(0, 80));
    Raise(ERRCODE_INVALID_PARAMETER_VALUE, "invalid queue name \"" + shown + "\"",
          "Queue names are 1 to 63 characters of a-z, 0-9, \"_\", \".\" and \"-\", starting with "
          "a letter or a digit.");
  }
  return name;
}

std::string_view NameArg(FunctionCallInfo fcinfo, int index, const char* what) {
  const std::string_view name = RequiredText(fcinfo, index, (std::string(what) + " name").c_str());
  if (!core::IsValidQueueName(name)) {
    const std::string shown(name.substr(0, 80));
    Raise(ERRCODE_INVALID_PARAMETER_VALUE,
          std::string("invalid ") + what + " name \"" + shown + "\"",
          std::string(1, static_cast<char>(std::toupper(what[0]))) + (what + 1) +
              " names are 1 to 63 characters of a-z, 0-9, \"_\", \".\" and \"-\", starting "
              "with a letter or a digit.");
  }
  return name;
}

std::vector<std::string_view> QueueNamesArg(FunctionCallInfo fcinfo, int index) {
  if (ArgIsNull(fcinfo, index)) Raise(ERRCODE_NULL_VALUE_NOT_ALLOWED, "queues must not be null");
  ArrayType* array = Guard([&] { return PG_GETARG_ARRAYTYPE_P(index); });
  if (ARR_NDIM(array) > 1) {
    Raise(ERRCODE_ARRAY_SUBSCRIPT_ERROR, "queues must be a one-dimensional array");
  }
  Datum* elements = nullptr;
  bool* nulls = nullptr;
  int count = 0;
  Guard([&] {
    deconstruct_array(array, TEXTOID, -1, false, TYPALIGN_INT, &elements, &nulls, &count);
  });
  if (count == 0 || count > core::kMaxClaimQueues) {
    Raise(ERRCODE_INVALID_PARAMETER_VALUE,
          "queues must name 1 to " + std::to_string(core::kMaxClaimQueues) + " queues",
          "It names " + std::to_string(count) + ".");
  }
  std::vector<std::string_view> names;
  names.reserve(count);
  for (int i = 0; i < count; ++i) {
    if (nulls[i]) {
      Raise(ERRCODE_NULL_VALUE_NOT_ALLOWED,
            "queue name at position " + std::to_string(i + 1) + " must not be null");
    }
    const text* element = reinterpret_cast<const text*>(DatumGetPointer(elements[i]));
    const std::string_view name(VARDATA_ANY(element), VARSIZE_ANY_EXHDR(element));
    if (!core::IsValidQueueName(name)) {
      Raise(ERRCODE_INVALID_PARAMETER_VALUE,
            "invalid queue name \"" + std::string(name.substr(0, 80)) + "\"",
            "Queue names are 1 to 63 characters of a-z, 0-9, \"_\", \".\" and \"-\", starting "
            "with a letter or a digit.");
    }
    if (std::find(names.begin(), names.end(), name) != names.end()) {
      Raise(ERRCODE_INVALID_PARAMETER_VALUE,
            "queue \"" + std::string(name) + "\" appears more than once in queues");
    }
    names.push_back(name);
  }
  return names;
}

std::string_view KeyArg(FunctionCallInfo fcinfo, int index, const char* what) {
  const std::string_view key = RequiredText(fcinfo, index, what);
  if (!core::IsValidKey(key)) {
    Raise(ERRCODE_INVALID_PARAMETER_VALUE,
          std::string(what) + " must be 1 to " + std::to_string(core::kMaxKeyBytes) + " bytes",
          "It is " + std::to_string(key.size()) + " bytes.");
  }
  return key;
}

int32 ListMaxArg(FunctionCallInfo fcinfo, int index) {
  const int32 max = ArgIsNull(fcinfo, index) ? 100 : PG_GETARG_INT32(index);
  if (max < 1 || max > core::kMaxClaimBatch) {
    Raise(ERRCODE_INVALID_PARAMETER_VALUE,
          "max must be between 1 and " + std::to_string(core::kMaxClaimBatch));
  }
  return max;
}

int32 RequiredInt32(FunctionCallInfo fcinfo, int index, const char* what) {
  if (ArgIsNull(fcinfo, index)) RaiseNull(what);
  return PG_GETARG_INT32(index);
}

int64 RequiredInt64(FunctionCallInfo fcinfo, int index, const char* what) {
  if (ArgIsNull(fcinfo, index)) RaiseNull(what);
  return PG_GETARG_INT64(index);
}

bool RequiredBool(FunctionCallInfo fcinfo, int index, const char* what) {
  if (ArgIsNull(fcinfo, index)) RaiseNull(what);
  return PG_GETARG_BOOL(index);
}

int64 IntervalMicros(const Interval* interval, const char* what) {
  __int128 total = interval->time;
  total += static_cast<__int128>(interval->day) * USECS_PER_DAY;
  total += static_cast<__int128>(interval->month) * DAYS_PER_MONTH * USECS_PER_DAY;
  if (total > PG_INT64_MAX || total < PG_INT64_MIN) {
    Raise(ERRCODE_DATETIME_VALUE_OUT_OF_RANGE, std::string(what) + " is out of range");
  }
  return static_cast<int64>(total);
}

int64 RequiredIntervalMicros(FunctionCallInfo fcinfo, int index, const char* what) {
  if (ArgIsNull(fcinfo, index)) RaiseNull(what);
  return IntervalMicros(PG_GETARG_INTERVAL_P(index), what);
}

int64 SpanMicros(const Interval* interval, const char* what) {
  const int64 micros = IntervalMicros(interval, what);
  if (micros < 0)
    Raise(ERRCODE_INVALID_PARAMETER_VALUE, std::string(what) + " must not be negative");
  if (micros > core::kMaxSettingIntervalMicros) {
    Raise(ERRCODE_INVALID_PARAMETER_VALUE, std::string(what) + " must be at most 100 years");
  }
  return micros;
}

int64 RequiredSpanMicros(FunctionCallInfo fcinfo, int index, const char* what) {
  if (ArgIsNull(fcinfo, index)) RaiseNull(what);
  return SpanMicros(PG_GETARG_INTERVAL_P(index), what);
}

void CheckJsonSize(Datum value, const char* what) {
  const Size bytes = Guard([&] { return toast_raw_datum_size(value); }) - VARHDRSZ;
  if (static_cast<int64>(bytes) > MaxPayloadBytes()) {
    Raise(ERRCODE_STRING_DATA_RIGHT_TRUNCATION,
          std::string(what) + " is too large (" + std::to_string(bytes) + " bytes)",
          "pgq.max_payload_bytes is " + std::to_string(MaxPayloadBytes()) + " bytes.",
          "Keep large documents in a table of your own and store their key.");
  }
}

void CheckLeaseValue(int64 lease_us, const char* what) {
  switch (core::CheckLease(lease_us, MaxLeaseMicros())) {
    case core::LeaseCheck::kOk:
      return;
    case core::LeaseCheck::kNotPositive:
      Raise(ERRCODE_INVALID_PARAMETER_VALUE, std::string(what) + " must be greater than zero");
    case core::LeaseCheck::kTooLong:
      Raise(ERRCODE_INVALID_PARAMETER_VALUE, std::string(what) + " exceeds pgq.max_lease",
            "The longest lease allowed is " + std::to_string(MaxLeaseMicros() / USECS_PER_SEC) +
                " seconds.",
            "Extend the lease with pgq.extend while the job runs, or raise pgq.max_lease.");
  }
}

Datum RequiredPayload(FunctionCallInfo fcinfo, int index) {
  if (ArgIsNull(fcinfo, index)) RaiseNull("payload");
  const Datum payload = PG_GETARG_DATUM(index);
  CheckPayloadSize(payload, -1);
  return payload;
}

PayloadArray PayloadsArg(FunctionCallInfo fcinfo, int index) {
  if (ArgIsNull(fcinfo, index)) Raise(ERRCODE_NULL_VALUE_NOT_ALLOWED, "payloads must not be null");
  PayloadArray payloads{Guard([&] { return PG_GETARG_ARRAYTYPE_P(index); }), nullptr, 0};
  if (ARR_NDIM(payloads.array) > 1) {
    Raise(ERRCODE_ARRAY_SUBSCRIPT_ERROR, "payloads must be a one-dimensional array");
  }
  bool* nulls = nullptr;
  Guard([&] {
    deconstruct_array(payloads.array, JSONBOID, -1, false, TYPALIGN_INT, &payloads.elements, &nulls,
                      &payloads.count);
  });
  for (int i = 0; i < payloads.count; ++i) {
    if (nulls[i]) {
      Raise(ERRCODE_NULL_VALUE_NOT_ALLOWED,
            "payload at position " + std::to_string(i + 1) + " must not be null");
    }
    CheckPayloadSize(payloads.elements[i], i + 1);
  }
  return payloads;
}

std::vector<Datum> KeysForJobsArg(FunctionCallInfo fcinfo, int index, int count, const char* what,
                                  std::size_t max_bytes) {
  std::vector<Datum> keys;
  if (ArgIsNull(fcinfo, index)) return keys;
  ArrayType* array = Guard([&] { return PG_GETARG_ARRAYTYPE_P(index); });
  if (ARR_NDIM(array) > 1) {
    Raise(ERRCODE_ARRAY_SUBSCRIPT_ERROR, std::string(what) + " must be a one-dimensional array");
  }
  Datum* elements = nullptr;
  bool* nulls = nullptr;
  int given = 0;
  Guard([&] {
    deconstruct_array(array, TEXTOID, -1, false, TYPALIGN_INT, &elements, &nulls, &given);
  });
  if (given != 1 && given != count) {
    Raise(ERRCODE_INVALID_PARAMETER_VALUE,
          std::string(what) + " must have one element, or one per payload (" +
              std::to_string(count) + ")",
          "It has " + std::to_string(given) + ".",
          "One element applies to every payload; a NULL element gives its payload none.");
  }
  keys.reserve(static_cast<size_t>(count));
  for (int i = 0; i < count; ++i) {
    const int at = given == 1 ? 0 : i;
    if (nulls[at]) {
      keys.push_back(0);
      continue;
    }
    const text* element = reinterpret_cast<const text*>(DatumGetPointer(elements[at]));
    const std::size_t bytes = VARSIZE_ANY_EXHDR(element);
    if (bytes == 0 || bytes > max_bytes) {
      Raise(ERRCODE_INVALID_PARAMETER_VALUE,
            std::string(what) + " at position " + std::to_string(at + 1) + " must be 1 to " +
                std::to_string(max_bytes) + " bytes",
            "It is " + std::to_string(bytes) + " bytes.",
            "Use a hash of a longer key, for example md5(key).");
    }
    keys.push_back(elements[at]);
  }
  return keys;
}

void CheckPayloadSize(Datum payload, int64 position) {
  // The uncompressed size, read from the varlena header without detoasting.
  const Size bytes = Guard([&] { return toast_raw_datum_size(payload); }) - VARHDRSZ;
  if (static_cast<int64>(bytes) > MaxPayloadBytes()) {
    std::string where = position >= 0 ? " at position " + std::to_string(position) : "";
    Raise(ERRCODE_PROGRAM_LIMIT_EXCEEDED,
          "payload" + where + " is too large (" + std::to_string(bytes) + " bytes)",
          "pgq.max_payload_bytes is " + std::to_string(MaxPayloadBytes()) + " bytes.",
          "Store large documents in a table of your own and enqueue their key.");
  }
}

Interval* MicrosInterval(int64 micros) {
  auto* interval = static_cast<Interval*>(palloc0(sizeof(Interval)));
  interval->time = micros;
  return interval;
}

Datum TextDatum(std::string_view value) {
  return Guard([&] {
    return PointerGetDatum(cstring_to_text_with_len(value.data(), static_cast<int>(value.size())));
  });
}

Datum BoundedTextArg(FunctionCallInfo fcinfo, int index, std::size_t max_bytes) {
  if (ArgIsNull(fcinfo, index)) return 0;
  text* value = Guard([&] { return PG_GETARG_TEXT_PP(index); });
  const std::size_t bytes = VARSIZE_ANY_EXHDR(value);
  if (bytes <= max_bytes) return PointerGetDatum(value);
  return BoundedText(std::string_view(VARDATA_ANY(value), bytes), max_bytes);
}

Datum BoundedText(std::string_view value, std::size_t max_bytes) {
  if (value.size() <= max_bytes) return TextDatum(value);
  const std::string_view marker = core::kTruncatedMarker;
  const int keep = Guard([&] {
    return pg_mbcliplen(value.data(), static_cast<int>(value.size()),
                        static_cast<int>(max_bytes - marker.size()));
  });
  std::string cut(value.data(), keep);
  cut += marker;
  return TextDatum(cut);
}

Oid RoleArg(FunctionCallInfo fcinfo, int index) {
  if (ArgIsNull(fcinfo, index)) Raise(ERRCODE_NULL_VALUE_NOT_ALLOWED, "role must not be null");
  const Name role = PG_GETARG_NAME(index);
  return Guard([role] { return get_role_oid(NameStr(*role), false); });
}

}  // namespace pgq::pg
