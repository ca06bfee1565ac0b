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

    def test_catalog_versions_are_handled_at_one_door(self):
        # Issue 32, ADR 0024: the library serves a catalog of its own version
        # only. pg/catalog_version.cpp reads pg_extension's version (the
        # boundary and the workers ask it); nothing else in src/ asks which
        # version is installed, keeps a flag per version, or counts the
        # arguments or columns an older release's SQL objects had.
        # (pg/args.cpp: ArgIsNull's bounds check, for every function.)
        door = {os.path.join("pg", f) for f in ("catalog_version.cpp", "catalog_version.h", "args.cpp")}
        asks = re.compile(r"extversion|Anum_pg_extension_extversion|PG_NARGS\s*\(|"
                          r"\b\d\.\d(\.\d)? catalog|catalog (before|older than) \d")
        wrong = [os.path.relpath(p, SRC) for zone in ORDER for p in sources(zone)
                 if os.path.relpath(p, SRC) not in door and asks.search(read(p))]
        self.assertEqual(wrong, [])
        catalog = read(os.path.join(SRC, "store", "catalog.h"))
        struct = re.search(r"struct Catalog \{(.*?)\};", catalog, re.S).group(1)
        self.assertNotRegex(struct, r"\bbool\b", "store::Catalog keeps no flag per version")
        self.assertIn("RequireCurrentCatalog();", read(os.path.join(SRC, "pg", "boundary.cpp")))


if __name__ == "__main__":
    unittest.main()
