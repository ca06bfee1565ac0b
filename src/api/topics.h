// Topics of the outbox and who may use them (issue 15, M4; docs/security.md):
// a topic is created by a role with the admin right on every queue, which
// owns it; its owner grants publish and subscribe with pgq.grant_topic.
#pragma once

#include "pg/spi.h"

namespace pgq::api {

enum class TopicRight { kPublish, kSubscribe };

// Raises undefined_object when there is no such topic, insufficient_privilege
// unless the current user owns it, is a member of its owner, is a superuser
// or holds `right` on it (directly or through a role it has the privileges
// of). Locks the topic row (FOR KEY SHARE) until the end of the transaction,
// so it cannot be dropped meanwhile.
void RequireTopicRight(pg::SpiSession& spi, std::string_view topic, TopicRight right);

// Whether the current user owns `topic` (or is a member of its owner, or a
// superuser); false when there is no such topic.
bool OwnsTopic(pg::SpiSession& spi, std::string_view topic);

}  // namespace pgq::api
