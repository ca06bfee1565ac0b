// Small shared facts, each one race-free statement: switches (set_switch,
// switch), ladders that only climb (advance), and once keys (once).
#include "pg/args.h"
#include "pg/spi.h"

namespace pgq::api {

namespace {

// Explicit value, last write wins; returns what is stored.
pg::Statement upsert_switch = {
    "INSERT INTO pgq.switches (name, value) VALUES ($1, $2)"
    " ON CONFLICT (name) DO UPDATE SET value = EXCLUDED.value, updated_at = pg_catalog.now()"
    " RETURNING value",
    2,
    {TEXTOID, BOOLOID},
    nullptr};

pg::Statement read_switch = {
    "SELECT value FROM pgq.switches WHERE name = $1", 1, {TEXTOID}, nullptr};

// Climbs only: a step at or below the stored one matches no row (but the
// conflicting row is locked, so the read that follows sees the latest step).
pg::Statement climb_ladder = {
    "INSERT INTO pgq.ladders AS l (subject, step) VALUES ($1, $2)"
    " ON CONFLICT (subject) DO UPDATE SET step = EXCLUDED.step, updated_at = pg_catalog.now()"
    " WHERE l.step < EXCLUDED.step"
    " RETURNING step",
    2,
    {TEXTOID, INT4OID},
    nullptr};

pg::Statement read_ladder = {
    "SELECT step FROM pgq.ladders WHERE subject = $1", 1, {TEXTOID}, nullptr};

// A concurrent caller with the same key waits for the first one's
// transaction: it inserts if that one rolled back, skips if it committed.
pg::Statement claim_once = {
    "INSERT INTO pgq.once_keys (key) VALUES ($1) ON CONFLICT (key) DO NOTHING",
    1,
    {TEXTOID},
    nullptr};

}  // namespace

}  // namespace pgq::api

using namespace pgq;

// set_switch(name, value) returns the stored value
PGQ_FUNCTION(pgq_set_switch) {
  const std::string_view name = pg::KeyArg(fcinfo, 0, "switch name");
  const bool value = pg::RequiredBool(fcinfo, 1, "value");
  pg::SpiSession spi;
  pg::Params params;
  params.Set(0, pg::TextDatum(name)).Set(1, BoolGetDatum(value));
  PG_RETURN_BOOL(spi.Execute(api::upsert_switch, params).Bool(0, 1));
}

// switch(name) returns the stored value, NULL if never set
PGQ_FUNCTION(pgq_switch) {
  const std::string_view name = pg::KeyArg(fcinfo, 0, "switch name");
  pg::SpiSession spi;
  pg::Params params;
  params.Set(0, pg::TextDatum(name));
  const pg::Result stored = spi.Execute(api::read_switch, params, 1);
  if (stored.empty()) PG_RETURN_NULL();
  PG_RETURN_BOOL(stored.Bool(0, 1));
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
  pg::Params params;
  params.Set(0, pg::TextDatum(subject)).Set(1, Int32GetDatum(step));
  const pg::Result climbed = spi.Execute(api::climb_ladder, params);
  if (climbed.size() == 1) PG_RETURN_INT32(climbed.Int32(0, 1));
  pg::Params read;
  read.Set(0, pg::TextDatum(subject));
  const pg::Result stored = spi.Execute(api::read_ladder, read, 1);
  if (stored.empty()) {
    pg::Raise(ERRCODE_T_R_SERIALIZATION_FAILURE,
              "ladder \"" + std::string(subject) + "\" changed concurrently", "",
              "Retry the transaction.");
  }
  PG_RETURN_INT32(stored.Int32(0, 1));
}

// once(key) returns true for the first caller that commits with key
PGQ_FUNCTION(pgq_once) {
  const std::string_view key = pg::KeyArg(fcinfo, 0, "key");
  pg::SpiSession spi;
  pg::Params params;
  params.Set(0, pg::TextDatum(key));
  PG_RETURN_BOOL(spi.Execute(api::claim_once, params).size() == 1);
}
