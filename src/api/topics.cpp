// pgq.create_topic, pgq.drop_topic, pgq.grant_topic, pgq.revoke_topic, and
// the check of a topic right that subscribe and publish make.
#include "api/topics.h"

#include <cctype>
#include <vector>

#include "service/rights.h"
#include "store/outbox.h"
#include "pg/args.h"

extern "C" {
#include "catalog/namespace.h"
#include "utils/acl.h"
#include "utils/lsyscache.h"
}

namespace pgq::api {

namespace {

const char* RightName(TopicRight right) {
  return right == TopicRight::kPublish ? "publish" : "subscribe";
}

[[noreturn]] void RaiseUnknownTopic(std::string_view topic) {
  const std::string copy(topic);
  const char* quoted = pg::Guard([&] { return quote_literal_cstr(copy.c_str()); });
  pg::Raise(ERRCODE_UNDEFINED_OBJECT, "topic \"" + copy + "\" does not exist", "",
            "Create it with pgq.create_topic(" + std::string(quoted) + ").");
}

struct TopicHolders {
  bool exists = false;
  Oid owner = InvalidOid;
  std::vector<Oid> granted;
};

TopicHolders LoadHolders(pg::SpiSession& spi, std::string_view topic, TopicRight right) {
  std::optional<store::TopicHolders> found = store::LockTopicHolders(spi, topic, RightName(right));
  if (!found) return TopicHolders{};
  return TopicHolders{true, found->owner, std::move(found->granted)};
}

bool IsOwner(Oid me, const TopicHolders& holders) {
  return service::IsSuperuser(me) || service::HasPrivsOf(me, holders.owner);
}

TopicRight TopicRightArg(FunctionCallInfo fcinfo, int index) {
  const std::string_view text = pg::RequiredText(fcinfo, index, "privilege");
  std::string lower(text);  // any case, as has_table_privilege takes them
  for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (lower == "publish") return TopicRight::kPublish;
  if (lower == "subscribe") return TopicRight::kSubscribe;
  pg::Raise(ERRCODE_INVALID_PARAMETER_VALUE,
            "unrecognized topic privilege type \"" + std::string(text) + "\"", {},
            "Use publish or subscribe.");
}

Datum ChangeTopicGrant(FunctionCallInfo fcinfo, bool give) {
  const Oid role = pg::RoleArg(fcinfo, 0);
  const std::string_view topic = pg::KeyArg(fcinfo, 1, "topic");
  const TopicRight right = TopicRightArg(fcinfo, 2);
  pg::SpiSession spi;
  const TopicHolders holders = LoadHolders(spi, topic, right);
  if (!holders.exists) RaiseUnknownTopic(topic);
  if (!IsOwner(GetUserId(), holders)) {
    pg::Raise(ERRCODE_INSUFFICIENT_PRIVILEGE,
              std::string("permission denied to ") + (give ? "grant" : "revoke") +
                  " rights on topic \"" + std::string(topic) + "\"",
              "Only its owner or a superuser may.");
  }
  PG_RETURN_BOOL(give ? store::InsertTopicGrant(spi, role, topic, RightName(right))
                      : store::DeleteTopicGrant(spi, role, topic, RightName(right)));
}

}  // namespace

void RequireTopicRight(pg::SpiSession& spi, std::string_view topic, TopicRight right) {
  const TopicHolders holders = LoadHolders(spi, topic, right);
  if (!holders.exists) RaiseUnknownTopic(topic);
  const Oid me = GetUserId();
  if (IsOwner(me, holders)) return;
  for (const Oid granted : holders.granted) {
    if (service::HasPrivsOf(me, granted)) return;
  }
  const std::string role = service::CurrentRoleName();
  const std::string topic_copy(topic);
  const char* quoted_role = pg::Guard([&] { return quote_literal_cstr(role.c_str()); });
  const char* quoted_topic = pg::Guard([&] { return quote_literal_cstr(topic_copy.c_str()); });
  const std::string quoted = std::string(quoted_role) + ", " + quoted_topic;
  pg::Raise(ERRCODE_INSUFFICIENT_PRIVILEGE,
            "permission denied for topic \"" + std::string(topic) + "\"",
            "Role \"" + role + "\" holds no " + RightName(right) + " right on it.",
            "The topic's owner or a superuser can grant it: SELECT pgq.grant_topic(" + quoted +
                ", '" + RightName(right) + "');");
}

bool OwnsTopic(pg::SpiSession& spi, std::string_view topic) {
  const TopicHolders holders = LoadHolders(spi, topic, TopicRight::kPublish);
  return holders.exists && IsOwner(GetUserId(), holders);
}

}  // namespace pgq::api

using namespace pgq;

// create_topic(topic, if_not_exists)
PGQ_FUNCTION(pgq_create_topic) {
  const std::string_view topic = pg::KeyArg(fcinfo, 0, "topic");
  const bool if_not_exists = !pg::ArgIsNull(fcinfo, 1) && PG_GETARG_BOOL(1);
  pg::SpiSession spi;
  // As create_queue: making names others will rely on is an operator's act.
  service::RequireRightOnEveryQueue(spi, core::kAdmin, "create topics");
  if (!store::InsertTopic(spi, topic, GetUserId()) && !if_not_exists) {
    pg::Raise(ERRCODE_DUPLICATE_OBJECT, "topic \"" + std::string(topic) + "\" already exists", "",
              "Use if_not_exists => true to ignore an existing topic.");
  }
  PG_RETURN_VOID();
}

// drop_topic(topic) returns whether it existed
PGQ_FUNCTION(pgq_drop_topic) {
  const std::string_view topic = pg::KeyArg(fcinfo, 0, "topic");
  pg::SpiSession spi;
  service::RequireRightSomewhere(spi, core::kAllRights);
  // A topic the caller does not own is answered as one that does not exist.
  if (!api::OwnsTopic(spi, topic)) PG_RETURN_BOOL(false);
  PG_RETURN_BOOL(store::DeleteTopic(spi, topic));
}

// grant_topic(role, topic, privilege) returns whether role did not hold it yet
PGQ_FUNCTION(pgq_grant_topic) { return api::ChangeTopicGrant(fcinfo, true); }

// revoke_topic(role, topic, privilege) returns whether there was such a grant
PGQ_FUNCTION(pgq_revoke_topic) { return api::ChangeTopicGrant(fcinfo, false); }
