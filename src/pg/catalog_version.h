// The one door for catalog versions (ADR 0024): this library serves only a
// database whose pgq_cpp extension is at the library's own version. Every
// SQL function of ours passes through RequireCurrentCatalog (the boundary,
// pg/boundary.cpp); the background workers ask CatalogIsCurrent before each
// pass and wait while it says no. Nothing else in src/ asks which version of
// pgq's tables is installed.
#pragma once

#include "pg/pg.h"

namespace pgq::pg {

// The version this library is: the control file's default_version, given
// to the compiler by the Makefile.
const char* LibraryVersion();

// What the database holds compared with the library.
struct CatalogCheck {
  enum class State { kCurrent, kOlder, kNewer, kNotInstalled } state;
  char installed[64];  // pg_extension.extversion ("" when not installed)
};

// Reads pg_extension (an index lookup) unless the answer "current" is kept:
// it is kept until the next relcache invalidation (any DROP or CREATE of a
// table sends one, so a catalog replaced by DROP EXTENSION and an older
// CREATE EXTENSION is seen); any other answer is read again at each call,
// so the first call after ALTER EXTENSION pgq_cpp UPDATE commits sees it.
CatalogCheck CheckCatalog();

// Raises 55000 (object_not_in_prerequisite_state) unless the installed
// catalog is the library's, with the hint to update (or, for a catalog newer
// than the library, to load the newer library). Passes while pgq_cpp's own
// CREATE or ALTER EXTENSION script runs (its statements may call our
// functions on the catalog they are building), under binary upgrade, and
// where pgq_cpp is not installed at all.
void RequireCurrentCatalog();

// For the background workers: whether they may work in this database now.
// Logs once, at LOG, when a worker starts waiting for ALTER EXTENSION
// pgq_cpp UPDATE and when it resumes. Call inside a transaction.
bool CatalogIsCurrent(const char* worker);

}  // namespace pgq::pg
