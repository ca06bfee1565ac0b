"""The source zones of docs/architecture.md (issue 16): a zone includes only
zones below it (core < pg < store < api < bgw < module.cpp), nothing
outside src/pg reads SPI's globals, and nothing outside the jobs store
(src/store) writes pgq.jobs, pgq.dead_jobs, the history or the dedupe holds.
No database needed."""
import glob
import os
import re
import unittest

SRC = os.path.join(os.path.dirname(__file__), "..", "..", "src")
ORDER = ["core", "pg", "store", "api", "bgw"]
INCLUDE = re.compile(r'^#include "(\w+)/', re.M)
WRITES_JOBS = re.compile(
    r"(INSERT INTO|UPDATE|DELETE FROM|TRUNCATE)\s+pgq\.(jobs|dead_jobs|job_history|dedupe_holds|dedupe_followers|job_dependencies|dependency_failures|dependency_releases)\w*\b", re.I)


def sources(zone):
    return sorted(glob.glob(os.path.join(SRC, zone, "*.cpp")) +
                  glob.glob(os.path.join(SRC, zone, "*.h")))


def read(path):
    with open(path, encoding="utf-8") as f:
        return f.read()


class LayersTest(unittest.TestCase):
    def test_no_zone_includes_a_higher_one(self):
        wrong = []
        for level, zone in enumerate(ORDER):
            for path in sources(zone):
                for included in INCLUDE.findall(read(path)):
                    if included in ORDER and ORDER.index(included) > level:
                        wrong.append(f"{os.path.relpath(path, SRC)} includes {included}/")
        self.assertEqual(wrong, [])

    def test_spi_globals_are_read_in_src_pg_only(self):
        wrong = [os.path.relpath(p, SRC) for zone in ORDER if zone != "pg"
                 for p in sources(zone) if re.search(r"SPI_tuptable|SPI_processed", read(p))]
        self.assertEqual(wrong, [])

    def test_only_the_jobs_store_writes_the_jobs_tables(self):
        wrong = [os.path.relpath(p, SRC) for zone in ORDER if zone != "store"
                 for p in sources(zone) if WRITES_JOBS.search(read(p))]
        self.assertEqual(wrong, [])
        # and the store does (the check reads what it claims to)
        self.assertTrue(any(WRITES_JOBS.search(read(p)) for p in sources("store")))

    def test_cache_invalidation_has_one_door(self):
        # Issue 32: the syscache and relcache callbacks are registered by
        # the invalidation service only, and only it sends relcache
        # invalidations (Announce): each cache says what it depends on
        # there (pg/invalidation.h) instead of keeping its own callback or
        # counter.
        service = os.path.join("pg", "invalidation.cpp")
        every = [p for zone in ORDER for p in sources(zone)] + [os.path.join(SRC, "module.cpp")]
        for pattern in (r"CacheRegister(Relcache|Syscache)Callback", r"CacheInvalidateRelcache"):
            found = sorted(os.path.relpath(p, SRC) for p in every if re.search(pattern, read(p)))
            self.assertEqual(found, [service], pattern)

    def test_one_way_to_wait_for_a_commit(self):
        # Issue 32: claims, next_batch and the handler workers wait on a
        # channel (pg/channel_wait.h), woken at commit by the ledger; no
        # other latch wait outside the workers' own loops, and nothing else
        # touches the waiter slots.
        latch = re.compile(r"\bWaitLatch(OrSocket)?\s*\(")
        waits = sorted(os.path.relpath(p, SRC) for zone in ORDER if zone != "bgw"
                       for p in sources(zone) if latch.search(read(p)))
        self.assertEqual(waits, [os.path.join("pg", "channel_wait.cpp")])
        slots = sorted(os.path.relpath(p, SRC) for zone in ORDER for p in sources(zone)
                       if re.search(r"->waiters\[|waiter_count", read(p)))
        self.assertEqual(slots, [os.path.join("pg", "channel_wait.cpp"),
                                 os.path.join("pg", "shared.cpp"),
                                 os.path.join("pg", "shared.h")])


if __name__ == "__main__":
    unittest.main()
