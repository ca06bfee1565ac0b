// Small shared facts, each one race-free statement (store/coordination.h):
// switches (set_switch, switch), ladders that only climb (advance), and once
// keys (once).
#include "pg/args.h"
#include "store/coordination.h"

using namespace pgq;

// set_switch(name, value) returns the stored value
PGQ_FUNCTION(pgq_set_switch) {
  const std::string_view name = pg::KeyArg(fcinfo, 0, "switch name");
  const bool value = pg::RequiredBool(fcinfo, 1, "value");
  pg::SpiSession spi;
  PG_RETURN_BOOL(store::SetSwitch(spi, name, value));
}

// switch(name) returns the stored value, NULL if never set
PGQ_FUNCTION(pgq_switch) {
  const std::string_view name = pg::KeyArg(fcinfo, 0, "switch name");
  pg::SpiSession spi;
  const std::optional<bool> stored = store::Switch(spi, name);
  if (!stored) PG_RETURN_NULL();
  PG_RETURN_BOOL(*stored);
}

// advance(subject, step) returns the stored step
PGQ_FUNCTION(pgq_advance) {
  const std::string_view subject = pg::KeyArg(fcinfo, 0, "subject");
  const int32 step = pg::RequiredInt32(fcinfo, 1, "step");
  if (step < 0) {
    pg::Raise(ERRCODE_INVALID_PARAMETER_VALUE, "step must not be negative",
              "step is " + std::to_string(step) + ".");
  }
  pg::SpiSession spi;
  if (const std::optional<int32> climbed = store::ClimbLadder(spi, subject, step)) {
    PG_RETURN_INT32(*climbed);
  }
  const std::optional<int32> stored = store::LadderStep(spi, subject);
  if (!stored) {
    pg::Raise(ERRCODE_T_R_SERIALIZATION_FAILURE,
              "ladder \"" + std::string(subject) + "\" changed concurrently", "",
              "Retry the transaction.");
  }
  PG_RETURN_INT32(*stored);
}

// once(key) returns true for the first caller that commits with key
PGQ_FUNCTION(pgq_once) {
  const std::string_view key = pg::KeyArg(fcinfo, 0, "key");
  pg::SpiSession spi;
  PG_RETURN_BOOL(store::TakeOnceKey(spi, key));
}
