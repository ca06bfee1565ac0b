// Small shared facts, each one race-free statement: switches, ladders that
// only climb, and once keys (store/coordination.h).
#include "pg/args.h"
#include "store/coordination.h"

namespace pgq::store {

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

bool SetSwitch(pg::SpiSession& spi, std::string_view name, bool value) {
  pg::Params params;
  params.Set(0, pg::TextDatum(name)).Set(1, BoolGetDatum(value));
  return spi.Execute(upsert_switch, params).Bool(0, "value");
}

std::optional<bool> Switch(pg::SpiSession& spi, std::string_view name) {
  pg::Params params;
  params.Set(0, pg::TextDatum(name));
  const pg::Result stored = spi.Execute(read_switch, params, 1);
  if (stored.empty()) return std::nullopt;
  return stored.Bool(0, "value");
}

std::optional<int32> ClimbLadder(pg::SpiSession& spi, std::string_view subject, int32 step) {
  pg::Params params;
  params.Set(0, pg::TextDatum(subject)).Set(1, Int32GetDatum(step));
  const pg::Result climbed = spi.Execute(climb_ladder, params);
  if (climbed.size() != 1) return std::nullopt;
  return climbed.Int32(0, "step");
}

std::optional<int32> LadderStep(pg::SpiSession& spi, std::string_view subject) {
  pg::Params params;
  params.Set(0, pg::TextDatum(subject));
  const pg::Result stored = spi.Execute(read_ladder, params, 1);
  if (stored.empty()) return std::nullopt;
  return stored.Int32(0, "step");
}

bool TakeOnceKey(pg::SpiSession& spi, std::string_view key) {
  pg::Params params;
  params.Set(0, pg::TextDatum(key));
  return spi.Execute(claim_once, params).size() == 1;
}

}  // namespace pgq::store
