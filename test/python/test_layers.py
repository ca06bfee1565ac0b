"""The source zones of docs/architecture.md (issue 16): a zone includes only
zones below it (core < pg < store < api < bgw < module.cpp), nothing
outside src/pg reads SPI's globals, and nothing outside the jobs store
(src/store) writes pgq.jobs, pgq.dead_jobs, the history or the dedupe holds.
One ring layer (issue 32, ADR 0024): only src/pg/segments.cpp creates, turns
or truncates ring segments. No database needed."""
import glob
import os
import re
import unittest

SRC = os.path.join(os.path.dirname(__file__), "..", "..", "src")
ORDER = ["core", "pg", "store", "api", "bgw"]
INCLUDE = re.compile(r'^#include "(\w+)/', re.M)
WRITES_JOBS = re.compile(
    r"(INSERT INTO|UPDATE|DELETE FROM|TRUNCATE)\s+pgq\.(jobs|dead_jobs|job_history|dedupe_holds|dedupe_followers|job_dependencies|dependency_failures|dependency_releases)\w*\b", re.I)

# What only the ring layer does: TRUNCATE, partition DDL, and writes to the
# rings' ledger. (Reading the ledger, or locking a ring's row, is anyone's.)
RING_WORK = re.compile(
    r"\bTRUNCATE\b|\bPARTITION\s+OF\b|\b(ATTACH|DETACH)\s+PARTITION\b"
    r"|(INSERT\s+INTO|UPDATE|DELETE\s+FROM)\s+pgq\.(rings|ring_segments)\b")
RING_LAYER = os.path.join("pg", "segments.cpp")
# Compaction (ADR 0008) empties pgq.jobs, no ring, before writing its live
# rows back; issue 33 removes it.
NOT_A_RING = {os.path.join("pg", "table_rewrite.cpp")}
COMMENT = re.compile(r"//[^\n]*")


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

    def test_only_the_ring_layer_creates_turns_or_truncates_segments(self):
        doing = {}
        for zone in ORDER:
            for path in sources(zone):
                name = os.path.relpath(path, SRC)
                found = RING_WORK.search(COMMENT.sub("", read(path)))
                if found:
                    doing[name] = found.group(0)
        self.assertIn(RING_LAYER, doing)  # the check reads what it claims to
        wrong = {name: what for name, what in doing.items()
                 if name != RING_LAYER and name not in NOT_A_RING}
        self.assertEqual(wrong, {})


if __name__ == "__main__":
    unittest.main()
