// A subtransaction for a scope: what runs in it (rows written, locks taken)
// is kept by Commit() and dropped by Rollback(), or when the scope is left
// by an exception. Rolling back also lets go of every lock taken inside,
// which no other way of ending a statement does before the transaction ends:
// that is why a waiting claim runs each attempt in one (api/claim.cpp).
//
// INVARIANT: a pg::Result of a statement run inside is not read after the
// subtransaction ends by Rollback() (its rows are freed with it), and
// nothing else is begun or ended in between (subtransactions nest strictly).
#pragma once

#include "pg/pg.h"

namespace pgq::pg {

class SubTransaction {
 public:
  SubTransaction();
  ~SubTransaction();
  SubTransaction(const SubTransaction&) = delete;
  SubTransaction& operator=(const SubTransaction&) = delete;

  // Merges what it did into the enclosing transaction.
  void Commit();
  // Undoes what it did and releases its locks.
  void Rollback();

 private:
  void End(bool commit);

  MemoryContext context_;
  ResourceOwner owner_;
  bool open_;
};

}  // namespace pgq::pg
