"""The source zones of docs/architecture.md (issue 16): a zone includes only
zones below it (core < pg < store < service < api < bgw < module.cpp),
nothing outside src/pg reads SPI's globals, and nothing outside the jobs
store (src/store) writes pgq.job_rows, pgq.dead_jobs, the history or the dedupe
holds.

Issue 32, the store owns every table: each table of ours (as sql/ creates
them) is written by exactly one file of src/store (pgq.job_rows by the jobs
store, the files that share store/internal.h; the ring layer's own ledger by
src/pg), src/api, src/bgw and the services (src/service) hold no statement text
and run none, and nothing outside
src/pg reads a result column by a literal number. What is not moved yet is
in the allow-lists below: they can only shrink (an entry that is no longer
needed fails the test too).
The workers and the services use nothing of src/api (issue 32: the
services the workers call live in src/service).
One ring layer (issue 32, ADR 0026): only src/pg/segments.cpp creates, turns
or truncates ring segments. No database needed."""
import glob
import os
import re
import unittest

SRC = os.path.join(os.path.dirname(__file__), "..", "..", "src")
ORDER = ["core", "pg", "store", "service", "api", "bgw"]
INCLUDE = re.compile(r'^#include "(\w+)/', re.M)
WRITES_JOBS = re.compile(
    r"(INSERT INTO|UPDATE|DELETE FROM|TRUNCATE)\s+pgq\.(job_rows|dead_jobs|job_history|dedupe_holds|dedupe_followers|job_dependencies|dependency_failures|dependency_releases)\w*\b", re.I)

# What only the ring layer does: TRUNCATE, partition DDL, and writes to the
# rings' ledger. (Reading the ledger, or locking a ring's row, is anyone's.)
RING_WORK = re.compile(
    r"\bTRUNCATE\b|\bPARTITION\s+OF\b|\b(ATTACH|DETACH)\s+PARTITION\b"
    r"|(INSERT\s+INTO|UPDATE|DELETE\s+FROM)\s+pgq\.(rings|ring_segments|rings_dropped)\b")
RING_LAYER = os.path.join("pg", "segments.cpp")
# Compaction (ADR 0008) empties pgq.job_rows, no ring, before writing its live
# rows back; issue 33 removes it.
NOT_A_RING = {os.path.join("pg", "table_rewrite.cpp")}
COMMENT = re.compile(r"//[^\n]*")


SQL = os.path.join(os.path.dirname(__file__), "..", "..", "sql")
# A statement that writes a table of ours: the table's name after pgq.
WRITES = re.compile(r"\b(?:INSERT\s+INTO|UPDATE|DELETE\s+FROM|TRUNCATE(?:\s+TABLE)?(?:\s+ONLY)?"
                    r"|MERGE\s+INTO|COPY)\s+pgq\.(\w+)")
# The text of a statement on a table of ours, in one C++ string literal.
STATEMENT = re.compile(r"\b(?:(?:SELECT|INSERT|UPDATE|DELETE|WITH)\b.*?\b(?:FROM|INTO|JOIN)\s+pgq\."
                       r"|UPDATE\s+pgq\.|TRUNCATE\b.*?\bpgq\.)", re.S)
# C++ string literals (raw or not), character literals and comments, so that
# a quote inside a comment does not start a string.
TOKENS = re.compile(r'R"(\w*)\((.*?)\)\1"|"((?:[^"\\\n]|\\.)*)"' r"|'(?:[^'\\\n]|\\.)*'"
                    r"|//[^\n]*|/\*.*?\*/", re.S)
# Defining or running a statement (pg/spi.h).
RUNS_STATEMENTS = re.compile(r"\bpg::Statement\b|\bBuiltStatement\b|\.Execute(?:SeeingLatest|Utility)?\(")
# A pg::Result read whose column is a number or a kConstant (a number
# exported under a name): result.Int64(row, 2), rows.Value(0, kFoo, &null).
COLUMN_BY_NUMBER = re.compile(
    r"\.(?:Int64|Int32|Bool|Float8|Text|IsNull|Value)\(\s*[^,()]+?,\s*"
    r"(?:\d+|(?:\w+::)*k[A-Z]\w*)\s*[,)]")

# The tables a job's row lives in, and an insert that lists their columns.
JOB_TABLES = ("job_rows", "dead_jobs", "job_history", "dedupe_followers")
JOB_INSERT = re.compile(r"\bINSERT\s+INTO\s+pgq\.(" + "|".join(JOB_TABLES) + r")\b(?:\s+AS\s+\w+)?\s*\(",
                        re.I)

# The jobs store: the files that share its internal header. pgq.job_rows is
# written by several of them (one file per operation: insert, claim,
# finish...), as one module.
JOBS_STORE_HEADER = '#include "store/internal.h"'
# The ring layer's ledger (src/pg/segments, ADR 0020), and its list of
# dropped rings whose tables are still to drop (ADR 0028).
RING_LAYER_TABLES = {"rings", "ring_segments", "rings_dropped"}

# Issue 32: files of src/api and src/bgw that still hold statements, and how
# many. Only shrinks.
STATEMENTS_NOT_MOVED_YET = {
}
# Issue 32: files outside src/pg that still read columns by number, and how
# many reads. Only shrinks.
COLUMN_NUMBERS_NOT_MOVED_YET = {
}


def sources(zone):
    return sorted(glob.glob(os.path.join(SRC, zone, "*.cpp")) +
                  glob.glob(os.path.join(SRC, zone, "*.h")))


def read(path):
    with open(path, encoding="utf-8") as f:
        return f.read()


def all_sources():
    return [p for zone in ORDER for p in sources(zone)]


def rel(path):
    return os.path.relpath(path, SRC)


def our_tables():
    """The tables the install and update scripts create in schema pgq (a
    segment pgq.x_1 counts as its ring's table pgq.x)."""
    tables = set()
    for path in glob.glob(os.path.join(SQL, "pgq_cpp--*.sql")):
        for name in re.findall(r"CREATE\s+(?:UNLOGGED\s+)?TABLE\s+(?:IF\s+NOT\s+EXISTS\s+)?pgq\.(\w+)",
                               read(path), re.I):
            tables.add(name)
    return tables


def table_of(name, tables):
    """The table a written name is: itself, or the ring whose segment it is
    (pgq.dead_jobs_2, or pgq.job_history_ + a number built at run time)."""
    while name not in tables and re.search(r"_\d*$", name):
        name = re.sub(r"_\d*$", "", name)
    return name


def string_literals(text):
    """The string literals of a C++ source, adjacent ones joined as the
    compiler joins them."""
    out, last_end = [], None
    for m in TOKENS.finditer(text):
        if m.group(2) is None and m.group(3) is None:
            last_end = None
            continue
        s = m.group(2) if m.group(2) is not None else m.group(3)
        if last_end is not None and text[last_end:m.start()].strip() == "":
            out[-1] += s
        else:
            out.append(s)
        last_end = m.end()
    return out


def writers_by_table():
    tables = our_tables()
    writers = {}
    for path in all_sources():
        for literal in string_literals(read(path)):
            for name in WRITES.findall(literal):
                writers.setdefault(table_of(name, tables), set()).add(rel(path))
    return tables, writers


class LayersTest(unittest.TestCase):
    def test_no_zone_includes_a_higher_one(self):
        wrong = []
        for level, zone in enumerate(ORDER):
            for path in sources(zone):
                for included in INCLUDE.findall(read(path)):
                    if included in ORDER and ORDER.index(included) > level:
                        wrong.append(f"{os.path.relpath(path, SRC)} includes {included}/")
        self.assertEqual(wrong, [])

    def test_workers_and_services_use_no_api(self):
        # Issue 32: what the background workers call (the claim's try, the
        # rights, the queue look-up, the handler checks) is a service of
        # src/service that api and bgw both use; src/api holds the SQL
        # functions only, and nothing in bgw or service reaches into it.
        wrong = []
        for zone in ("bgw", "service"):
            for path in sources(zone):
                text = COMMENT.sub("", read(path))
                if re.search(r'^#include "api/', text, re.M) or re.search(r"\bapi::", text):
                    wrong.append(rel(path))
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

    def test_each_table_is_written_by_one_file_of_the_store(self):
        # No exception: a second writer of any table (say dead.cpp deleting
        # from pgq.dedupe_followers again) fails here.
        tables, writers = writers_by_table()
        jobs_store = {rel(p) for p in sources("store") if JOBS_STORE_HEADER in read(p)}
        wrong = []
        for table in sorted(writers):
            files = writers[table]
            if table not in tables:
                wrong.append(f"pgq.{table} is written by {sorted(files)} but no sql/ script creates it")
            elif table == "job_rows":
                if not files <= jobs_store:
                    wrong.append(f"pgq.job_rows written outside the jobs store: {sorted(files - jobs_store)}")
            elif table in RING_LAYER_TABLES:
                if files != {"pg/segments.cpp"}:
                    wrong.append(f"pgq.{table} written by {sorted(files)}, not the ring layer")
            elif len(files) != 1 or not next(iter(files)).startswith("store/"):
                wrong.append(f"pgq.{table} written by {sorted(files)}")
        self.assertEqual(wrong, [])
        # the check reads what it claims to: the store writes the tables of jobs
        self.assertTrue(writers.get("job_rows", set()) and "dependency_releases" in writers)

    def test_a_jobs_rows_have_one_insert_column_list_per_table(self):
        # Issue 32: a job's columns are spelled once per table it lives in
        # (InsertJobsSql for pgq.job_rows, dead.cpp's InsertDeadSql for
        # pgq.dead_jobs, whatever the rows come from: a job buried, a
        # follower cancelled, a dead job kept for good moving to a ring), so
        # that a column added to one of them is added in one place.
        lists = {}
        for path in all_sources():
            for literal in string_literals(read(path)):
                for name in JOB_INSERT.findall(literal):
                    lists.setdefault(name, []).append(rel(path))
        self.assertEqual({t: len(files) for t, files in lists.items() if len(files) != 1}, {},
                         lists)
        # the check reads what it claims to
        self.assertEqual(set(lists), set(JOB_TABLES))

    def test_no_statement_text_in_api_or_bgw(self):
        found = {}
        for path in sources("service") + sources("api") + sources("bgw"):
            count = sum(1 for s in string_literals(read(path)) if STATEMENT.search(s))
            if count:
                found[rel(path)] = count
        self.assertEqual(found, STATEMENTS_NOT_MOVED_YET,
                         "statements belong in src/store; the allow-list only shrinks")
        # the check reads what it claims to
        self.assertTrue(any(STATEMENT.search(s) for p in sources("store")
                            for s in string_literals(read(p))))

    def test_api_bgw_and_services_run_no_statement(self):
        """Not even on PostgreSQL's own catalogs: a statement is the store's
        (or src/pg's), and its caller gets typed rows."""
        wrong = [rel(p) for p in sources("service") + sources("api") + sources("bgw")
                 if RUNS_STATEMENTS.search(TOKENS.sub(" ", read(p)))]
        self.assertEqual(wrong, [])
        # the check reads what it claims to
        self.assertTrue(any(RUNS_STATEMENTS.search(read(p)) for p in sources("store")))

    def test_no_column_read_by_number_outside_src_pg(self):
        found = {}
        for path in all_sources():
            if rel(path).startswith("pg/"):
                continue
            code = TOKENS.sub(lambda m: m.group(0) if m.group(0).startswith(("\"", "R\"")) else " ",
                              read(path))
            count = len(COLUMN_BY_NUMBER.findall(code))
            if count:
                found[rel(path)] = count
        self.assertEqual(found, COLUMN_NUMBERS_NOT_MOVED_YET,
                         "read columns by name (result.Int64(row, \"id\"), or ColumnNumber once for "
                         "a loop); the allow-list only shrinks")

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
        # 3.1 (issue 34): waiting for room under max_pending, or for
        # another backend's count of it, sleeps on the queue slot's
        # condition variable (pg/queue_slots.h), broadcast by the commits
        # that lower the count; nowhere else.
        sleeps = sorted(os.path.relpath(p, SRC) for zone in ORDER for p in sources(zone)
                        if re.search(r"\bConditionVariable(Timed)?Sleep\s*\(", read(p)))
        self.assertEqual(sleeps, [os.path.join("pg", "queue_slots.cpp")])
        slots = sorted(os.path.relpath(p, SRC) for zone in ORDER for p in sources(zone)
                       if re.search(r"->waiters\[|waiter_count", read(p)))
        self.assertEqual(slots, [os.path.join("pg", "channel_wait.cpp"),
                                 os.path.join("pg", "shared.cpp"),
                                 os.path.join("pg", "shared.h")])


if __name__ == "__main__":
    unittest.main()
