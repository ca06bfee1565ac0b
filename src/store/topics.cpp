// Topics and who may publish or subscribe: pgq.topics, pgq.topic_grants
// (store/outbox.h).
#include "pg/args.h"
#include "store/outbox.h"

namespace pgq::store {

namespace {

pg::Statement insert_topic = {
    "INSERT INTO pgq.topics (name, owner) VALUES ($1, $2) ON CONFLICT DO NOTHING",
    2,
    {TEXTOID, REGROLEOID},
    nullptr};

pg::Statement delete_topic = {"DELETE FROM pgq.topics WHERE name = $1", 1, {TEXTOID}, nullptr};

// The topic's owner and the roles granted `$2` on it, the row locked.
pg::Statement topic_holders = {
    "SELECT t.owner::oid AS owner,"
    "       ARRAY(SELECT g.role::oid FROM pgq.topic_grants g"
    "              WHERE g.topic = t.name AND g.privilege = $2) AS granted"
    "  FROM pgq.topics t WHERE t.name = $1 FOR KEY SHARE",
    2,
    {TEXTOID, TEXTOID},
    nullptr};

pg::Statement insert_topic_grant = {
    "INSERT INTO pgq.topic_grants (role, topic, privilege) VALUES ($1, $2, $3)"
    " ON CONFLICT DO NOTHING",
    3,
    {REGROLEOID, TEXTOID, TEXTOID},
    nullptr};

pg::Statement delete_topic_grant = {
    "DELETE FROM pgq.topic_grants WHERE role = $1 AND topic = $2 AND privilege = $3",
    3,
    {REGROLEOID, TEXTOID, TEXTOID},
    nullptr};

// Grants of roles dropped since (as pgq.grants, store/grants.h).
pg::Statement drop_orphan_topic_grants = {
    "DELETE FROM pgq.topic_grants g"
    " WHERE NOT EXISTS (SELECT 1 FROM pg_catalog.pg_roles r WHERE r.oid = g.role::oid)",
    0,
    {},
    nullptr};

bool ChangeTopicGrant(pg::SpiSession& spi, pg::Statement& statement, Oid role,
                      std::string_view topic, std::string_view privilege) {
  pg::Params params;
  params.Set(0, ObjectIdGetDatum(role))
      .Set(1, pg::TextDatum(topic))
      .Set(2, pg::TextDatum(privilege));
  return spi.Execute(statement, params).size() == 1;
}

}  // namespace

bool InsertTopic(pg::SpiSession& spi, std::string_view topic, Oid owner) {
  pg::Params params;
  params.Set(0, pg::TextDatum(topic)).Set(1, ObjectIdGetDatum(owner));
  return !spi.Execute(insert_topic, params).empty();
}

bool DeleteTopic(pg::SpiSession& spi, std::string_view topic) {
  pg::Params params;
  params.Set(0, pg::TextDatum(topic));
  return spi.Execute(delete_topic, params).size() == 1;
}

std::optional<TopicHolders> LockTopicHolders(pg::SpiSession& spi, std::string_view topic,
                                             std::string_view privilege) {
  pg::Params params;
  params.Set(0, pg::TextDatum(topic)).Set(1, pg::TextDatum(privilege));
  const pg::Result found = spi.Execute(topic_holders, params, 1);
  if (found.empty()) return std::nullopt;
  TopicHolders holders;
  bool is_null = false;
  holders.owner = DatumGetObjectId(found.Value(0, "owner", &is_null));
  const Datum array = found.Value(0, "granted", &is_null);
  Datum* elements = nullptr;
  int count = 0;
  pg::Guard([&] {
    deconstruct_array(DatumGetArrayTypeP(array), OIDOID, sizeof(Oid), true, TYPALIGN_INT, &elements,
                      nullptr, &count);
  });
  for (int i = 0; i < count; ++i) holders.granted.push_back(DatumGetObjectId(elements[i]));
  return holders;
}

bool InsertTopicGrant(pg::SpiSession& spi, Oid role, std::string_view topic,
                      std::string_view privilege) {
  return ChangeTopicGrant(spi, insert_topic_grant, role, topic, privilege);
}

bool DeleteTopicGrant(pg::SpiSession& spi, Oid role, std::string_view topic,
                      std::string_view privilege) {
  return ChangeTopicGrant(spi, delete_topic_grant, role, topic, privilege);
}

void DropOrphanTopicGrants(pg::SpiSession& spi) {
  pg::Params none;
  spi.Execute(drop_orphan_topic_grants, none);
}

}  // namespace pgq::store
