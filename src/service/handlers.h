// In-database handlers: the checks made when a queue gets one. The workers
// that run them are in bgw/handler_worker.cpp.
#pragma once

#include <string>

#include "pg/pg.h"

namespace pgq::service {

// Checks that `handler` is a function taking one pgq.claimed_job that
// `owner` may execute; returns its schema-qualified signature, the text
// stored in pgq.queues.handler. Raises invalid_object_definition or
// insufficient_privilege.
std::string CheckHandler(Oid handler, Oid owner);

// The type pgq.claimed_job, the handlers' argument.
Oid ClaimedJobType();

// The role named `owner` (a queue's owner), or undefined_object.
Oid OwnerRole(std::string_view owner, std::string_view queue);

}  // namespace pgq::service
