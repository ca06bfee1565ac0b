#include "api/queue_ref.h"

#include "pg/args.h"

namespace pgq::api {

namespace {

pg::Statement find_queue = {
    "SELECT queue_id, max_attempts, notify FROM pgq.queues WHERE name = $1", 1, {TEXTOID}, nullptr};

}  // namespace

void RaiseUnknownQueue(std::string_view name) {
  pg::Raise(ERRCODE_UNDEFINED_OBJECT, "queue \"" + std::string(name) + "\" does not exist", {},
            "Create it with pgq.create_queue('" + std::string(name) + "').");
}

QueueRef FindQueue(pg::SpiSession& spi, std::string_view name, Datum name_text) {
  pg::Params params;
  params.Set(0, name_text);
  if (spi.Execute(find_queue, params, 1) == 0) RaiseUnknownQueue(name);
  return QueueRef{spi.Int32(0, 1), spi.Int32(0, 2), spi.Bool(0, 3)};
}

QueueRef FindQueue(pg::SpiSession& spi, std::string_view name) {
  return FindQueue(spi, name, pg::TextDatum(name));
}

}  // namespace pgq::api
