"""The demo's tenants scene: fair turns and backpressure in one shared queue.

The same database also runs a multi-tenant backend: step 6 of the story in
scenario.py's docstring, printed as section 5. Every customer's jobs go to
one queue, 'tenant_jobs', created with fairness => 'group' (the group key is
the tenant) and max_pending (docs/fairness.md):

  5a. acme imports 1200 contacts in one pgq.enqueue_many(..., group_keys =>
      ARRAY['acme']). Right after it, globex signs up 20 users and initech 10,
      one pgq.enqueue each. Three workers claim one job at a time: with the
      turns, globex's and initech's jobs go in between acme's instead of
      waiting behind 1200, and are all done while acme's import has barely
      started.
  5b. acme's next import, 100 more contacts, would take the queue past its
      max_pending: it is refused whole (SQLSTATE 53400, nothing of it kept).
      acme's importer waits in pgq.wait_for_room, woken by the workers'
      completions once the queue is below its low-water mark, and imports
      again: this time it gets in.

group_concurrency is far above any tenant's burst: jobs past a tenant's cap
wait in a table and take no turns (docs/fairness.md, "Limits and choices").
The workers record each job in tenant_work in the same transaction as
pgq.complete; the Monitor samples it per tenant (live.py's follow()) for the
live view and the chart's tenants panel.

tenants_scene() runs it all and returns its checks, (label, value, ok,
note), for scenario.py's summary; an error in a thread goes to the
scenario's Shared.record_error and fails the demo.
"""

import math
import random
import threading
import time

from common import DIM, GREEN, RED, RESET, connect, errors, out, print_table, query_table

QUEUE = "tenant_jobs"
# The first import leaves no room for the second; once wait_for_room lets
# acme go (below the low-water mark) there is room for it: it is no bigger
# than MAX_PENDING - LOW_WATER (125), so one wait and one retry do.
MAX_PENDING = 1250
LOW_WATER = math.ceil(MAX_PENDING * 0.9)  # where pgq.wait_for_room lets a producer go
GROUP_CONCURRENCY = 10000   # above any burst: every job stays in the turns
NOISY = "acme"
IMPORT = 1200               # acme's first import, one enqueue_many
NEXT_IMPORT = 100           # its second: past max_pending until the queue drains
QUIET = {"globex": 20, "initech": 10}   # jobs each, enqueued one by one
FAIR_BY = 0.10              # globex must be done before acme's import is 10% done
WORKERS = 3
WORK = (0.006, 0.012)       # seconds of simulated work per job
LEASE = "30 seconds"
ROOM_WAIT = "2 seconds"     # one pgq.wait_for_room call; the importer calls again
FIRST_CLAIMS = 24           # claims shown by tenant
SCENE_TIMEOUT = 40          # seconds; the scene takes about 8

SCHEMA = f"""
DROP TABLE IF EXISTS tenant_work;
SELECT pgq.drop_queue('{QUEUE}', force => true) FROM pgq.queues WHERE name = '{QUEUE}';
-- Written by the worker in the same transaction as pgq.complete. No unique
-- constraint on purpose: the checks count duplicates instead.
CREATE TABLE tenant_work (
    job_id  bigint      NOT NULL,
    tenant  text        NOT NULL,
    claim   integer     NOT NULL,   -- the queue's n-th claim, as the workers counted
    worker  text        NOT NULL,
    done_at timestamptz NOT NULL DEFAULT clock_timestamp()
);
SELECT pgq.create_queue('{QUEUE}', lease => '{LEASE}', fairness => 'group',
                        group_concurrency => {GROUP_CONCURRENCY}, max_pending => {MAX_PENDING});
"""

# What the monitor samples: per tenant, jobs done and jobs still in the
# queue, in one snapshot (a job is in one or the other, never both); every
# tenant from the start, at 0 before its first job.
PER_TENANT = f"""
SELECT t.tenant, COALESCE(sum(c.done), 0)::integer, COALESCE(sum(c.unfinished), 0)::integer
  FROM unnest(ARRAY['{NOISY}', '{"', '".join(QUIET)}']) WITH ORDINALITY t(tenant, n)
  LEFT JOIN (SELECT tenant, 1 AS done, 0 AS unfinished FROM tenant_work
             UNION ALL
             SELECT j.group_key, 0, 1 FROM pgq.jobs j JOIN pgq.queues q USING (queue_id)
              WHERE q.name = '{QUEUE}') c USING (tenant)
 GROUP BY t.tenant, t.n ORDER BY t.n"""


class Tenants:
    """What the scene's threads record."""

    def __init__(self, track, monitor):
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.imported = threading.Event()   # acme's first import committed
        self.track, self.monitor = track, monitor
        self.t0 = time.monotonic()
        self.imported_at = None     # seconds: when acme's first import committed
        self.enqueued = {}          # tenant -> [job ids], as the producers got them back
        self.producing = 1 + len(QUIET)
        self.claims = []            # tenant of each claim, in the workers' order
        self.done = {}              # tenant -> jobs done
        self.finished = {}          # tenant -> (seconds, its last claim, acme's done then)
        self.last_done = {}         # tenant -> seconds: its latest completion
        self.refused = None         # (seconds, the error) of acme's refused import
        self.room = None            # (seconds waited, wait_for_room calls, imports tried)
        self.fair_keys = []         # pgq.fair_keys once every tenant has enqueued
        self.lost_completes = 0

    def elapsed(self):
        return time.monotonic() - self.t0

    def note(self, text):
        if self.monitor is not None:
            self.monitor.note(self.track, text)


def fail(ten, shared, who, exc):
    """An error in a thread: reported (it fails the demo), and the scene
    stops. shared.stop is no use here: the signup story set it when it ended."""
    shared.record_error(who, exc)
    ten.stop.set()
    ten.imported.set()  # nobody waits for an import that will not come


# --- producers -----------------------------------------------------------------

def import_contacts(conn, batch, first, count):
    """One enqueue_many: the whole batch or, past max_pending, nothing."""
    return [r[0] for r in conn.execute(
        "SELECT pgq.enqueue_many(%s,"
        "  (SELECT array_agg(jsonb_build_object('tenant', %s::text, 'task', 'import_contact',"
        "                                       'batch', %s::integer, 'contact', n))"
        "     FROM generate_series(%s::integer, %s::integer) n),"
        "  group_keys => ARRAY[%s])",
        (QUEUE, NOISY, batch, first, first + count - 1, NOISY)).fetchall()]


def importer(dsn, ten, shared):
    """acme: the big import, the refused one, the wait for room, the retry."""
    who = NOISY
    try:
        with connect(dsn) as conn:
            ids = import_contacts(conn, 1, 1, IMPORT)
            with ten.lock:
                ten.enqueued[NOISY] = list(ids)
                ten.imported_at = ten.elapsed()
            out.event(who, f"imports {IMPORT} contacts: ONE pgq.enqueue_many(..., group_keys => "
                           f"ARRAY['{NOISY}']), jobs {ids[0]}-{ids[-1]}")
            ten.imported.set()
            try:
                import_contacts(conn, 2, IMPORT + 1, NEXT_IMPORT)
                raise AssertionError(f"the import of {NEXT_IMPORT} more went past max_pending")
            except errors.ConfigurationLimitExceeded as exc:
                with ten.lock:
                    ten.refused = (ten.elapsed(), exc)
                ten.note(f"{NOISY}: refused (53400)")
                out.event(who, f"imports {NEXT_IMPORT} more: {RED}refused whole{RESET}, "
                               f"SQLSTATE {exc.sqlstate}: {exc.diag.message_primary}")
            out.event(who, f"{DIM}waits: pgq.wait_for_room('{QUEUE}', '{ROOM_WAIT}'), until "
                           f"fewer than {LOW_WATER} jobs are unfinished{RESET}")
            retried = wait_and_import(conn, ten, who)
            if retried is not None:
                with ten.lock:
                    ten.enqueued[NOISY] += retried
    except Exception as exc:  # noqa: BLE001 - reported, fails the demo
        fail(ten, shared, who, exc)
    finally:
        with ten.lock:
            ten.producing -= 1


def wait_and_import(conn, ten, who):
    """Waits for room and imports again; returns the job ids (None if the
    scene stopped first). A wait that runs out, or room another producer took
    first, means waiting again."""
    started, calls, tries = time.monotonic(), 0, 0
    while not ten.stop.is_set():
        calls += 1
        if not conn.execute("SELECT pgq.wait_for_room(%s, %s::interval)",
                            (QUEUE, ROOM_WAIT)).fetchone()[0]:
            continue
        waited = time.monotonic() - started
        tries += 1
        try:
            ids = import_contacts(conn, 2, IMPORT + 1, NEXT_IMPORT)
        except errors.ConfigurationLimitExceeded:
            continue
        with ten.lock:
            ten.room = (waited, calls, tries)
            acme_done = ten.done.get(NOISY, 0)
        ten.note(f"{NOISY}: in, waited {waited:.2f} s")
        out.event(who, f"pgq.wait_for_room → true after {waited:.2f} s (woken by the workers' "
                       f"completions); imports the {NEXT_IMPORT} again: {GREEN}in{RESET}, "
                       f"jobs {ids[0]}-{ids[-1]} ({acme_done} of its first {IMPORT} done)")
        return ids
    return None


def quiet_tenant(dsn, ten, shared, tenant, jobs):
    """globex, initech: a few signups right after acme's import, one job each."""
    who = tenant
    try:
        with connect(dsn) as conn:
            ten.imported.wait(timeout=SCENE_TIMEOUT)  # connected already: right after it
            ids = [conn.execute(
                "SELECT pgq.enqueue(%s, jsonb_build_object('tenant', %s::text,"
                "                   'task', 'welcome_email', 'user', %s::integer),"
                "                   group_key => %s)", (QUEUE, tenant, i, tenant)).fetchone()[0]
                for i in range(1, jobs + 1)]
            with ten.lock:
                ten.enqueued[tenant] = ids
                last = len(ten.enqueued) == 1 + len(QUIET)
            out.event(who, f"signs up {jobs} users: {jobs} × pgq.enqueue(..., group_key => "
                           f"'{tenant}'), one by one")
            if last:
                # Every tenant has ready jobs now: the turns, as the server keeps them.
                rows = conn.execute("SELECT group_key, held, more, running, served, waiting"
                                    "  FROM pgq.fair_keys(%s)", (QUEUE,)).fetchall()
                with ten.lock:
                    ten.fair_keys = (ten.elapsed(), rows)
    except Exception as exc:  # noqa: BLE001 - reported, fails the demo
        fail(ten, shared, who, exc)
    finally:
        with ten.lock:
            ten.producing -= 1


# --- workers -------------------------------------------------------------------

class LeaseLost(Exception):
    pass


def worker(dsn, ten, shared, index):
    who = f"worker-{index}"
    rng = random.Random(300 + index)
    try:
        with connect(dsn) as conn:
            while not ten.stop.is_set():
                row = conn.execute("SELECT id, attempt, payload->>'tenant'"
                                   "  FROM pgq.claim(%s, 1, %s::interval, '200 ms')",
                                   (QUEUE, LEASE)).fetchone()
                if row is not None:
                    handle(conn, ten, who, rng, *row)
    except Exception as exc:  # noqa: BLE001 - reported, fails the demo
        fail(ten, shared, who, exc)


def handle(conn, ten, who, rng, job_id, attempt, tenant):
    with ten.lock:
        ten.claims.append(tenant)
        claim = len(ten.claims)
    time.sleep(rng.uniform(*WORK))  # the tenant's job: an import row, an email
    try:
        with conn.transaction():
            conn.execute("INSERT INTO tenant_work (job_id, tenant, claim, worker)"
                         " VALUES (%s, %s, %s, %s)", (job_id, tenant, claim, who))
            if not conn.execute("SELECT pgq.complete(%s, %s)", (job_id, attempt)).fetchone()[0]:
                raise LeaseLost()
    except LeaseLost:
        with ten.lock:
            ten.lost_completes += 1
        out.event(who, f"{RED}job {job_id}: pgq.complete returned false (lease lost){RESET}")
        return
    finished(ten, tenant, claim)


def finished(ten, tenant, claim):
    """Counts a committed job; says so when a quiet tenant has all its jobs done."""
    with ten.lock:
        ten.done[tenant] = ten.done.get(tenant, 0) + 1
        ten.last_done[tenant] = ten.elapsed()
        if tenant not in QUIET or ten.done[tenant] != QUIET[tenant]:
            return
        acme = ten.done.get(NOISY, 0)
        ten.finished[tenant] = (ten.elapsed(), claim, acme)
    out.event(tenant, f"{GREEN}all {QUIET[tenant]} jobs done{RESET}, its last one was claim "
                      f"{claim} of the queue; {NOISY}'s import {acme * 100 / IMPORT:.0f}% done "
                      f"({acme} of {IMPORT})")


# --- the scene -------------------------------------------------------------------

def tenants_scene(dsn, conn, shared, monitor=None):
    """Section 5. Returns its checks for the summary: (label, value, ok, note)."""
    try:
        return tenants_story(dsn, conn, shared, monitor)
    except Exception as exc:  # noqa: BLE001 - reported, fails the demo
        shared.record_error("tenants", exc)
        return [("tenants scene", "error", False, str(exc))]


def tenants_story(dsn, conn, shared, monitor):
    out.heading("5. One queue for every tenant: fair turns, and a limit that pushes back")
    conn.execute(SCHEMA)
    out.line(f"queue '{QUEUE}': fairness => 'group' (the group key is the tenant), "
             f"group_concurrency {GROUP_CONCURRENCY}, max_pending {MAX_PENDING} "
             f"(wait_for_room's low-water mark: {LOW_WATER})")
    out.line(f"{DIM}{WORKERS} workers claim one job at a time ({WORK[0] * 1000:.0f}-"
             f"{WORK[1] * 1000:.0f} ms of work); each job: INSERT INTO tenant_work + "
             f"pgq.complete in one transaction{RESET}")
    out.line()
    track = monitor.follow(f"{QUEUE} by tenant", PER_TENANT) if monitor else None
    ten = Tenants(track, monitor)
    out.restart_clock()
    timed_out = run_threads(dsn, conn, ten, shared)
    report(conn, ten)
    return checks(conn, ten, timed_out)


def run_threads(dsn, conn, ten, shared):
    """Workers first (they are always there), then the tenants; until every
    job enqueued is done. Returns whether it gave up at SCENE_TIMEOUT."""
    threads = [threading.Thread(target=worker, args=(dsn, ten, shared, i), daemon=True)
               for i in range(1, WORKERS + 1)]
    threads.append(threading.Thread(target=importer, args=(dsn, ten, shared), daemon=True))
    threads += [threading.Thread(target=quiet_tenant, args=(dsn, ten, shared, t, n), daemon=True)
                for t, n in QUIET.items()]
    for t in threads:
        t.start()
    deadline = time.monotonic() + SCENE_TIMEOUT
    timed_out = False
    while not ten.stop.is_set():
        time.sleep(0.1)
        with ten.lock:
            producing = ten.producing
            enqueued = sum(len(ids) for ids in ten.enqueued.values())
        done = conn.execute("SELECT count(*) FROM tenant_work").fetchone()[0]
        if not producing and done >= enqueued:
            break
        if time.monotonic() > deadline:
            timed_out = True
            out.event("main", f"{RED}gave up after {SCENE_TIMEOUT} s: {enqueued - done} "
                              f"tenant jobs not done{RESET}")
            break
    ten.stop.set()
    for t in threads:
        t.join(timeout=10)
    if not timed_out:
        out.event("main", "every tenant's jobs done: stopping the workers")
    return timed_out


def report(conn, ten):
    with ten.lock:
        claims = list(ten.claims)
        fair_keys = ten.fair_keys
    out.line()
    shown = " ".join(claims[:FIRST_CLAIMS])
    out.line(f"the first {min(FIRST_CLAIMS, len(claims))} claims, by tenant: {shown} …")
    if fair_keys:
        out.line()
        out.line(f"{DIM}SELECT group_key, held, more, running, served, waiting FROM "
                 f"pgq.fair_keys('{QUEUE}');  -- at {fair_keys[0]:.1f}s, once every tenant "
                 f"had enqueued{RESET}")
        print_table(fair_keys[1], ["group_key", "held", "more", "running", "served", "waiting"])

    rows = conn.execute("SELECT tenant, count(*), min(claim), max(claim)"
                        "  FROM tenant_work GROUP BY tenant").fetchall()
    stats = {r[0]: r[1:] for r in rows}
    how = {NOISY: f"{IMPORT} in one call, then {NEXT_IMPORT} after the wait"}
    how.update({t: f"{n} one by one" for t, n in QUIET.items()})
    table = []
    for tenant in [NOISY, *QUIET]:
        count, first, last = stats.get(tenant, (0, None, None))
        done_after = ten.last_done.get(tenant)
        table.append((tenant, how[tenant], count, f"{first}-{last}",
                      f"{done_after:.1f} s" if done_after is not None else "-"))
    out.line()
    print_table(table, ["tenant", "enqueued", "jobs done", "claims", "all done after"])

    # What the same workers would have made globex wait in the order the
    # jobs came: acme's whole first import, at the rate measured here (from
    # that import's commit to the last completion).
    quiet = next(iter(QUIET))
    busy = max(ten.last_done.values(), default=0) - (ten.imported_at or 0)
    rate = len(claims) / busy if busy > 0 else 0
    if rate and quiet in ten.finished:
        out.line(f"In the order the jobs came, {quiet}'s first job would have waited for "
                 f"{NOISY}'s {IMPORT}: about {IMPORT / rate:.1f} s at this scene's "
                 f"{rate:.0f} jobs/s. In turns, all {QUIET[quiet]} were done "
                 f"{ten.finished[quiet][0] - (ten.imported_at or 0):.1f} s after {NOISY}'s "
                 f"import.")
    out.line()
    out.line(f"{DIM}SELECT kept, found FROM pgq.check_pending('{QUEUE}');  -- the count "
             f"max_pending keeps, against the tables{RESET}")
    query_table(conn, "SELECT kept, found FROM pgq.check_pending(%s)", (QUEUE,))


def checks(conn, ten, timed_out):
    result = []

    def check(label, value, ok, note=""):
        result.append((label, value, ok, note))

    with ten.lock:
        enqueued = {t: list(ids) for t, ids in ten.enqueued.items()}
        refused, room, finished = ten.refused, ten.room, dict(ten.finished)
    all_ids = [i for ids in enqueued.values() for i in ids]
    work = conn.execute("SELECT job_id, tenant FROM tenant_work").fetchall()
    done_ids = [r[0] for r in work]
    dups = len(done_ids) - len(set(done_ids))
    lost = set(all_ids) - set(done_ids)
    unknown = set(done_ids) - set(all_ids)  # e.g. a job of the refused import
    pending = conn.execute("SELECT count(*) FROM pgq.jobs j JOIN pgq.queues q USING (queue_id)"
                           " WHERE q.name = %s", (QUEUE,)).fetchone()[0]
    expected = IMPORT + NEXT_IMPORT + sum(QUIET.values())
    check("tenant jobs done once", f"{len(set(done_ids))}/{len(all_ids)}",
          len(all_ids) == len(set(all_ids)) == expected and not dups and not lost
          and not unknown and pending == 0 and not ten.lost_completes and not timed_out,
          f"{dups} duplicated, {len(lost)} lost, {len(unknown)} not enqueued, {pending} "
          f"pending; the retried import included")

    quiet = next(iter(QUIET))
    at = finished.get(quiet)
    acme_share = at[2] / IMPORT if at else 1.0
    check(f"{quiet} done in turns", f"{NOISY} {acme_share * 100:.0f}%",
          at is not None and acme_share < FAIR_BY,
          f"all {QUIET[quiet]} of {quiet}'s jobs done before {NOISY}'s import reached "
          f"{FAIR_BY * 100:.0f}%" + (f" (at claim {at[1]})" if at else ""))

    retried = enqueued.get(NOISY, [])[IMPORT:]
    check("import past max_pending", "53400, in" if refused and room else "?",
          refused is not None and refused[1].sqlstate == "53400" and room is not None
          and len(retried) == NEXT_IMPORT,
          f"refused whole (53400); in after {room[0]:.2f} s in pgq.wait_for_room"
          if room else "not refused, or never let in")

    peak = peak_unfinished(ten.track)
    kept, found = conn.execute("SELECT kept, found FROM pgq.check_pending(%s)",
                               (QUEUE,)).fetchone()
    check(f"pgq.check_pending('{QUEUE}')", f"{kept} = {found}",
          kept == found == 0 and peak <= MAX_PENDING,
          f"the count max_pending keeps = the tables'; at most {peak} unfinished when sampled"
          if ten.track else "the count max_pending keeps = the tables'")
    return result


def peak_unfinished(track):
    """The most jobs the queue held unfinished in one sample of the track."""
    if track is None:
        return 0
    per_sample = {}
    for series in track.copy()[0].values():
        for t, _done, unfinished in series:
            per_sample[t] = per_sample.get(t, 0) + unfinished
    return max(per_sample.values(), default=0)
