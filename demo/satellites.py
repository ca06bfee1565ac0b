"""The demo's satellite scene: a recurring job, the outbox, in-database handlers.

The same database also runs a satellite-pass backend: step 5 of the story in
scenario.py's docstring, printed as section 4. Everything the application
does runs as `satops`, a role without superuser that the scene creates (USAGE
on schema pgq and rights on its tables, as the README asks for now):

  4a. A schedule, pgq.schedule('tle-refresh', 'tle', '@every 1 second'),
      enqueues one refresh job at a time. A Python worker claims it (waiting
      in pgq.claim), "downloads" orbital elements (a fixed sequence: some
      satellites change on some refreshes, none on others) and, in ONE
      transaction, updates the satellites whose elements changed, publishes
      one 'orbit.changed' event per change (pgq.publish, dedupe key
      tle-<norad>-<epoch>) and completes the job. Refresh 3 crashes before
      COMMIT on its first attempt: its events and their jobs vanish with the
      rollback, and its retry publishes them again. The last refresh puts the
      schedule back to its production cadence in its own transaction, so no
      firing slips in after it.
  4b. Each event lands in two subscriber queues that have in-database
      handlers, run by pgq_cpp's 'pgq handler' background workers as the
      queues' owner (satops): 'passes' recomputes the satellite's passes over
      three ground stations and logs it; 'alerts' pages the operators, and
      its ground-station API times out on the first attempt for one
      satellite: the job fails, waits its back-off and succeeds on attempt 2.
      The server log says so; the scene follows it.

The scene's settings, the simulated catalogue and the SQL that sets up its
role, tables, handlers and queues are in satellites_setup.py.

satellites_scene() runs it all and returns its checks, (label, value, ok,
note), for scenario.py's summary; an error in a thread goes to the
scenario's Shared.record_error and fails the demo.
"""

import os
import re
import threading
import time

from common import BOLD, DIM, GREEN, RED, RESET, connect, out, print_table, query_table
from satellites_setup import (
    ALERTS_QUEUE, CHANGES, CRASH_REFRESH, EVERY, FLAKY, PASSES_QUEUE, POLL, PRODUCTION_SPEC,
    QUEUES, REFRESHES, ROLE, SATELLITES, SCENE_TIMEOUT, SCHEDULE, SCHEMA, STATIONS, TLE_LEASE,
    TLE_QUEUE, TOPIC, download, epoch_of, name_of)


def hms(ts):
    return ts.strftime("%H:%M:%S.%f")[:-3] if ts is not None else "?"


class SimulatedCrash(Exception):
    pass


class LeaseLost(Exception):
    pass


class Sat:
    """What the scene's threads record."""

    def __init__(self):
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.job_order = []       # refresh job ids, in the order first claimed
        self.runs = {}            # job id -> dict: the refresh as the worker saw it
        self.committed = []       # (norad, old epoch, new epoch, event id) that committed
        self.rolled_back = None   # dict: the refresh attempt that crashed before COMMIT
        self.done = False         # the worker completed its REFRESHES refreshes
        self.max_tle_jobs = 0     # most refresh jobs seen pending/running at once
        self.samples = 0
        self.failures = []        # (handler, job, attempt, queue, message, outcome) from the log
        self.seen_log = set()     # passes_log and alerts ids already shown
        self.seen_running = set() # (pid, handler) seen active in pg_stat_activity
        self.seen_retry = set()   # (job, attempt) seen back in pgq.jobs after a failure


# --- the refresh worker (outside the database, like the HTTP client) -----------------

def refresh_worker(dsn, sat, shared):
    who = "tle-worker"
    try:
        with connect(dsn) as conn:
            conn.execute(f"SET ROLE {ROLE}")
            while not sat.stop.is_set() and not sat.done:
                row = conn.execute(
                    "SELECT c.id, c.attempt, clock_timestamp()"
                    "  FROM pgq.claim(%s, 1, %s::interval, wait => '500 ms') AS c",
                    (TLE_QUEUE, TLE_LEASE)).fetchone()
                if row is not None:
                    refresh(conn, sat, who, *row)
    except Exception as exc:  # noqa: BLE001 - reported, fails the demo
        shared.record_error(who, exc)
        sat.stop.set()


def observe(conn, sql, params):
    """A read of pgq's own tables for the demo's report: the application
    role holds rights on its queues, not on pgq's tables, so the read is made
    as the session's superuser (in the same transaction, to see what it
    wrote), and the role is taken again."""
    conn.execute("RESET ROLE")
    try:
        return conn.execute(sql, params).fetchall()
    finally:
        conn.execute(f"SET ROLE {ROLE}")


def refresh(conn, sat, who, job_id, attempt, claimed_at):
    with sat.lock:
        if job_id not in sat.job_order:
            sat.job_order.append(job_id)
        n = sat.job_order.index(job_id) + 1
    fired = observe(conn, "SELECT fired_at FROM pgq.schedule_runs WHERE job_id = %s", (job_id,))
    fired_at = fired[0][0] if fired else None
    feed = download(n)
    crash = n == CRASH_REFRESH and attempt == 1
    last = n == REFRESHES
    changed = []
    try:
        with conn.transaction():
            current = {r[0]: r[1] for r in conn.execute(
                "SELECT norad_id, epoch FROM satellites ORDER BY norad_id FOR UPDATE")}
            for norad, (epoch, motion) in feed.items():
                if current[norad] == epoch:
                    continue  # same elements: no write, no event
                conn.execute("UPDATE satellites SET epoch = %s, mean_motion = %s,"
                             "       revision = revision + 1, updated_at = now()"
                             " WHERE norad_id = %s", (epoch, motion, norad))
                event_id = conn.execute(
                    "SELECT pgq.publish(%s, jsonb_build_object('norad_id', %s::integer,"
                    "                                          'epoch', %s::text),"
                    "                   dedupe_key => %s)",
                    (TOPIC, norad, epoch, f"tle-{norad}-{epoch}")).fetchone()[0]
                changed.append((norad, current[norad], epoch, event_id))
            if crash:
                # What publish created, seen from inside the transaction.
                jobs = observe(
                    conn,
                    "SELECT j.id, q.name FROM pgq.jobs j JOIN pgq.queues q USING (queue_id)"
                    " WHERE j.payload->>'event_id' = ANY (%s) ORDER BY j.id",
                    ([str(c[3]) for c in changed],))
                raise SimulatedCrash(jobs)
            if last:
                # Back to the production cadence, atomically with the last
                # demo refresh: no firing can come after it.
                conn.execute("SELECT pgq.schedule(%s, %s, %s, %s)",
                             (SCHEDULE, TLE_QUEUE, PRODUCTION_SPEC, '{"source": "celestrak"}'))
            completed_at = conn.execute("SELECT clock_timestamp()").fetchone()[0]
            if not conn.execute("SELECT pgq.complete(%s, %s)",
                                (job_id, attempt)).fetchone()[0]:
                raise LeaseLost(f"refresh job {job_id} attempt {attempt}: pgq.complete "
                                f"returned false")
    except SimulatedCrash as exc:
        after_crash(conn, sat, who, n, job_id, attempt, claimed_at, fired_at, changed, exc.args[0])
        return

    with sat.lock:
        run = sat.runs.setdefault(job_id, {"n": n, "job": job_id, "fired_at": fired_at,
                                           "claimed_at": claimed_at})
        run.update(attempt=attempt, completed_at=completed_at, changed=changed)
        sat.committed.extend(changed)
        if last:
            sat.done = True
    head = f"refresh {n} · job {job_id}" + (f" attempt {attempt}" if attempt > 1 else "") \
        + f" (fired {hms(fired_at)})"
    if not changed:
        out.event(who, f"{head}: no orbit changed → nothing written, nothing published, "
                       f"{GREEN}complete{RESET}")
    else:
        what = ", ".join(f"{name_of(c[0])} → event {c[3]}" for c in changed)
        out.event(who, f"{head}: {what}; UPDATE + publish + complete, "
                       f"{GREEN}one COMMIT{RESET}")
    if last:
        out.event(who, f"{DIM}and in the same transaction: pgq.schedule('{SCHEDULE}', "
                       f"'{TLE_QUEUE}', '{PRODUCTION_SPEC}'), the production cadence{RESET}")


def after_crash(conn, sat, who, n, job_id, attempt, claimed_at, fired_at, changed, jobs):
    event_ids = [c[3] for c in changed]
    job_ids = [j[0] for j in jobs]
    events_left = observe(conn, "SELECT count(*) FROM pgq.events WHERE id = ANY (%s)",
                          (event_ids,))[0][0]
    jobs_left = observe(
        conn,
        "SELECT (SELECT count(*) FROM pgq.jobs WHERE id = ANY (%(j)s))"
        "     + (SELECT count(*) FROM pgq.dead_jobs WHERE id = ANY (%(j)s))",
        {"j": job_ids})[0][0]
    epochs = dict(conn.execute("SELECT norad_id, epoch FROM satellites WHERE norad_id = ANY (%s)",
                               ([c[0] for c in changed],)).fetchall())
    unchanged = all(epochs.get(c[0]) == c[1] for c in changed)
    with sat.lock:
        sat.rolled_back = {"n": n, "job": job_id, "events": event_ids, "jobs": job_ids,
                           "events_left": events_left, "jobs_left": jobs_left,
                           "unchanged": unchanged, "changes": len(changed)}
        sat.runs.setdefault(job_id, {"n": n, "job": job_id, "fired_at": fired_at,
                                     "claimed_at": claimed_at})
    what = ", ".join(f"{name_of(c[0])} → event {c[3]}" for c in changed)
    out.event(who, f"refresh {n} · job {job_id} (fired {hms(fired_at)}): {what}; "
                   f"jobs {', '.join(f'{j} ({q})' for j, q in jobs)}")
    out.event("", f"{RED}the worker crashes before COMMIT{RESET} → rollback: "
                  f"events {', '.join(map(str, event_ids))}: {events_left} rows; "
                  f"their {len(job_ids)} jobs: {jobs_left} rows; "
                  f"{'elements unchanged' if unchanged else RED + 'elements CHANGED' + RESET}")
    outcome = conn.execute("SELECT pgq.fail(%s, %s, 'worker crashed before COMMIT', '0 s')",
                           (job_id, attempt)).fetchone()[0]
    out.event("", f"pgq.fail(job {job_id}, attempt {attempt}) → '{outcome}': the refresh "
                  f"runs again as attempt {attempt + 1}, and no new firing meanwhile")


# --- the watcher: what the handlers did, the server log, the schedule ------------------

HANDLER_LINE = re.compile(r'pgq handler (\S+) failed for job (\d+) \(attempt (\d+)\) of queue '
                          r'"([^"]*)": (.*); the job is (.*)$')


def watcher(dsn, server_log, offset, sat, shared):
    who = "watcher"
    try:
        with connect(dsn) as conn, open(server_log, encoding="utf-8", errors="replace") as log:
            log.seek(offset)
            while True:
                stopping = sat.stop.is_set()
                look(conn, log, sat)
                if stopping:
                    return
                time.sleep(POLL)
    except Exception as exc:  # noqa: BLE001 - reported, fails the demo
        shared.record_error(who, exc)
        sat.stop.set()


def look(conn, log, sat):
    tle_jobs = conn.execute(
        "SELECT count(*) FROM pgq.jobs j JOIN pgq.queues q USING (queue_id)"
        " WHERE q.name = %s", (TLE_QUEUE,)).fetchone()[0]
    with sat.lock:
        sat.max_tle_jobs = max(sat.max_tle_jobs, tle_jobs)
        sat.samples += 1
    for pid, query, user in conn.execute(
            "SELECT pid, query, usename FROM pg_stat_activity"
            " WHERE backend_type = 'pgq handler' AND datname = current_database()"
            "   AND state = 'active' AND query <> 'pgq handler: claim'").fetchall():
        if (pid, query) not in sat.seen_running:
            sat.seen_running.add((pid, query))
            out.event("activity", f"{DIM}pg_stat_activity: pid {pid} ('pgq handler', usename "
                                  f"{user}) active: {query}{RESET}")
    for job_id, queue, attempt, error, ready_in in conn.execute(
            "SELECT j.id, q.name, j.attempt, j.last_error,"
            "       extract(epoch FROM j.run_at - pgq.clock())::float8"
            "  FROM pgq.jobs j JOIN pgq.queues q USING (queue_id)"
            " WHERE q.name = ANY (%s) AND j.state = 'p' AND j.last_error IS NOT NULL",
            ([PASSES_QUEUE, ALERTS_QUEUE],)).fetchall():
        if (job_id, attempt) not in sat.seen_retry:
            sat.seen_retry.add((job_id, attempt))
            when = f"ready in {ready_in:.2f} s" if ready_in > 0 else "ready"
            out.event("pgq.jobs", f"job {job_id} ({queue}) pending again after attempt "
                                  f"{attempt}: last_error '{error}', {when}")
    for line in log:
        match = HANDLER_LINE.search(line)
        if not match:
            continue
        failure = (match.group(1), int(match.group(2)), int(match.group(3)), match.group(4),
                   match.group(5), match.group(6).strip())
        with sat.lock:
            sat.failures.append(failure)
        out.event("server log", f"{RED}pgq handler {failure[0]} failed for job {failure[1]} "
                                f"(attempt {failure[2]}) of queue \"{failure[3]}\": "
                                f"{failure[4]}{RESET}; the job is {failure[5]}")
    rows = conn.execute(
        "SELECT 'passes', id, event_id, norad_id, job_id, attempt, computed_by,"
        "       passes || ' passes over 3 stations recomputed', at"
        "  FROM passes_log"
        " UNION ALL "
        "SELECT 'alerts', id, event_id, norad_id, job_id, attempt, sent_by, 'operators paged', at"
        "  FROM alerts ORDER BY 9").fetchall()
    for kind, row_id, event_id, norad, job_id, attempt, role, what, _at in rows:
        if (kind, row_id) in sat.seen_log:
            continue
        sat.seen_log.add((kind, row_id))
        retry = f", {GREEN}attempt {attempt}{RESET}" if attempt > 1 else ""
        out.event(kind, f"handler: event {event_id} {name_of(norad)}: {what} "
                        f"(job {job_id}{retry}, as {role})")


# --- the scene ---------------------------------------------------------------------------

def handler_workers(conn):
    return conn.execute(
        "SELECT pid, backend_type, application_name, usename, state, wait_event,"
        "       query"
        "  FROM pg_stat_activity"
        " WHERE backend_type = 'pgq handler' AND datname = current_database()"
        " ORDER BY pid").fetchall()


def show_handler_workers(rows):
    print_table(rows, ["pid", "backend_type", "application_name", "usename", "state",
                       "wait_event", "query"])


def satellites_scene(dsn, conn, shared, server_log):
    """Section 4. Returns its checks for the summary: (label, value, ok, note)."""
    sat = Sat()
    try:
        return satellites_story(dsn, conn, shared, server_log, sat)
    except Exception as exc:  # noqa: BLE001 - reported, fails the demo
        shared.record_error("satellites", exc)
        return [("satellite scene", "error", False, str(exc))]
    finally:
        sat.stop.set()


def satellites_story(dsn, conn, shared, server_log, sat):
    checks = []

    def check(label, value, ok, note=""):
        checks.append((label, value, ok, note))

    out.heading("4. A satellite-pass backend: a recurring refresh, an outbox, "
                "in-database handlers")
    log_offset = os.path.getsize(server_log)
    conn.execute(SCHEMA)
    with conn.transaction():
        conn.execute(f"SET LOCAL ROLE {ROLE}")
        for norad, (name, inclination, motion) in SATELLITES.items():
            conn.execute("INSERT INTO satellites (norad_id, name, epoch, inclination, mean_motion)"
                         " VALUES (%s, %s, %s, %s, %s)",
                         (norad, name, epoch_of(norad, 0), inclination, motion))
        for station in STATIONS:
            conn.execute("INSERT INTO ground_stations VALUES (%s, %s, %s)", station)
    out.line(f"role {ROLE} (no superuser): USAGE on schema pgq, rights on its tables; it owns "
             f"tables satellites ({len(SATELLITES)}), ground_stations ({len(STATIONS)}), "
             f"passes, passes_log, alerts")
    out.line(f"{DIM}SELECT name, owner, handler, max_attempts, backoff_base FROM pgq.queues;"
             f"  -- created by {ROLE}{RESET}")
    query_table(conn, "SELECT name, owner, handler, max_attempts, backoff_base FROM pgq.queues"
                      " WHERE name = ANY (%s) ORDER BY queue_id", (list(QUEUES),))
    out.line(f"pgq.subscribe('{TOPIC}', '{PASSES_QUEUE}') and pgq.subscribe('{TOPIC}', "
             f"'{ALERTS_QUEUE}'): each event becomes one job in each queue")

    # The maintenance worker starts the handler workers once a queue has a handler.
    wanted = int(conn.execute("SELECT current_setting('pgq.handler_workers')").fetchone()[0])
    deadline = time.monotonic() + 10
    workers = handler_workers(conn)
    while len(workers) < wanted and time.monotonic() < deadline:
        time.sleep(POLL)
        workers = handler_workers(conn)
    out.line()
    out.line(f"{DIM}the handlers run inside the server: SELECT ... FROM pg_stat_activity "
             f"WHERE backend_type = 'pgq handler';{RESET}")
    show_handler_workers(workers)
    check("'pgq handler' workers", len(workers), len(workers) == wanted > 0,
          f"pgq.handler_workers = {wanted}, seen in pg_stat_activity")

    # --- the timeline ----------------------------------------------------------------
    out.line()
    out.line(f"{BOLD}4a-4b. pgq.schedule('{SCHEDULE}', '{TLE_QUEUE}', '@every {EVERY} second'): "
             f"{REFRESHES} refreshes, each one transaction; the handlers react{RESET}")
    out.line(f"{DIM}@every = a fixed delay: the next firing one interval after the previous "
             f"run finished, noticed by the maintenance pass (every pgq.maintenance_interval)"
             f"{RESET}")
    out.line()
    out.restart_clock()
    conn.execute(f"SET ROLE {ROLE}")
    try:
        conn.execute("SELECT pgq.schedule(%s, %s, %s, %s)",
                     (SCHEDULE, TLE_QUEUE, f"@every {EVERY} second", '{"source": "celestrak"}'))
    finally:
        conn.execute("RESET ROLE")
    threads = [threading.Thread(target=watcher, args=(dsn, server_log, log_offset, sat, shared),
                                daemon=True),
               threading.Thread(target=refresh_worker, args=(dsn, sat, shared), daemon=True)]
    for t in threads:
        t.start()

    deadline = time.monotonic() + SCENE_TIMEOUT
    timed_out = False
    while not sat.stop.is_set():
        time.sleep(POLL)
        left = conn.execute("SELECT count(*) FROM pgq.jobs j JOIN pgq.queues q USING (queue_id)"
                            " WHERE q.name = ANY (%s)", (list(QUEUES),)).fetchone()[0]
        if sat.done and left == 0:
            break
        if time.monotonic() > deadline:
            timed_out = True
            out.event("main", f"{RED}gave up after {SCENE_TIMEOUT} s: {left} satellite jobs "
                              f"still pending or running{RESET}")
            break
    sat.stop.set()
    for t in threads:
        t.join(timeout=10)
    out.event("main", "refreshes done, handler queues drained: stopping threads")

    # --- what happened --------------------------------------------------------------
    runs_db = conn.execute("SELECT job_id, slot, fired_at FROM pgq.schedule_runs"
                           " WHERE name = %s ORDER BY fired_at", (SCHEDULE,)).fetchall()
    runs = [dict(sat.runs.get(job_id, {"n": "?", "job": job_id}), fired_at=fired_at)
            for job_id, _slot, fired_at in runs_db]
    out.line()
    out.line(f"{DIM}pgq.schedule_runs joined with what the worker saw, on the server's clock "
             f"(fired_at: the maintenance pass's clock when it started; the job appears when "
             f"the pass commits){RESET}")
    table, overlaps, short_gaps = [], [], []
    for i, r in enumerate(runs):
        nxt = runs[i + 1]["fired_at"] if i + 1 < len(runs) else None
        done_at = r.get("completed_at")
        gap = (nxt - done_at).total_seconds() if nxt and done_at else None
        claimed = r.get("claimed_at")
        if done_at is None or claimed is None or claimed < r["fired_at"] \
                or (nxt is not None and nxt <= done_at):
            overlaps.append(r["job"])
        if gap is not None and gap < EVERY - 0.05:
            short_gaps.append(r["job"])
        table.append((r["n"], r["job"], hms(r["fired_at"]),
                      f"+{(claimed - r['fired_at']).total_seconds() * 1000:.0f} ms" if claimed
                      else "?",
                      r.get("attempt", "?"), hms(done_at),
                      f"{gap:.2f} s" if gap is not None else "",
                      ", ".join(name_of(c[0]) for c in r.get("changed", [])) or "-"))
    print_table(table, ["refresh", "job", "fired_at", "claimed", "attempts", "committed",
                        "next firing after", "orbits changed"])

    events = conn.execute(
        "SELECT e.id, (e.payload->>'norad_id')::integer, e.dedupe_key,"
        "       (SELECT count(*) FROM passes_log l WHERE l.event_id = e.id),"
        "       (SELECT string_agg(DISTINCT l.computed_by, ',') FROM passes_log l"
        "         WHERE l.event_id = e.id),"
        "       (SELECT count(*) FROM alerts a WHERE a.event_id = e.id),"
        "       (SELECT string_agg(a.attempt::text, ',') FROM alerts a WHERE a.event_id = e.id)"
        "  FROM pgq.events e WHERE e.topic = %s ORDER BY e.id", (TOPIC,)).fetchall()
    out.line()
    out.line(f"{DIM}pgq.events ('{TOPIC}') with what the handlers wrote for each: passes_log "
             f"(as whom) and alerts (at which attempt){RESET}")
    print_table([(e[0], name_of(e[1]), e[2], e[3], e[4], e[5], e[6]) for e in events],
                ["event", "satellite", "dedupe_key", "passes_log", "computed_by", "alerts",
                 "alert attempt"])
    out.line()
    out.line(f"{DIM}SELECT norad_id, name, epoch, mean_motion, revision FROM satellites; "
             f"and their passes{RESET}")
    query_table(conn,
                "SELECT s.norad_id, s.name, s.epoch, s.mean_motion, s.revision,"
                "       count(p.*) AS passes, min(p.aos) AS next_aos,"
                "       bool_and(p.epoch = s.epoch) AS passes_current"
                "  FROM satellites s LEFT JOIN passes p USING (norad_id)"
                " GROUP BY 1 ORDER BY 1")

    # --- checks ----------------------------------------------------------------------
    with sat.lock:
        worker_jobs = list(sat.job_order)
        committed = list(sat.committed)
        rolled_back = sat.rolled_back
        failures = list(sat.failures)
        max_tle_jobs, samples = sat.max_tle_jobs, sat.samples

    run_jobs = [r[0] for r in runs_db]
    check("TLE refreshes fired", len(runs_db),
          sat.done and len(runs_db) == REFRESHES and run_jobs == worker_jobs
          and all(r.get("completed_at") for r in runs),
          "pgq.schedule_runs = the jobs the worker claimed and completed, in order")
    check("refresh runs overlapping", len(overlaps) + (max_tle_jobs > 1),
          not overlaps and max_tle_jobs <= 1 and not short_gaps and samples > 0,
          f"each firing ≥ {EVERY} s after the previous run committed; pgq.jobs sampled "
          f"{samples} times: " + ("never two refresh jobs" if max_tle_jobs <= 1
                                  else f"{max_tle_jobs} refresh jobs at once"))

    event_keys = {e[2]: e[0] for e in events}
    committed_keys = {f"tle-{c[0]}-{c[2]}": c[3] for c in committed}
    revisions = conn.execute("SELECT COALESCE(sum(revision), 0) FROM satellites").fetchone()[0]
    expected_changes = sum(len(s) for r, s in CHANGES.items() if r <= REFRESHES)
    check("orbit changes → events", f"{len(committed)} → {len(events)}",
          len(committed) == len(events) == revisions == expected_changes
          and event_keys == committed_keys,
          "each committed change has exactly its one event, and no event lacks a change")

    not_once = [e[0] for e in events if e[3] != 1]
    log_rows = conn.execute("SELECT event_id, computed_by FROM passes_log").fetchall()
    phantom = [r[0] for r in log_rows if r[0] not in {e[0] for e in events}]
    roles = sorted({r[1] for r in log_rows})
    stale = conn.execute("SELECT count(*) FROM passes p JOIN satellites s USING (norad_id)"
                         " WHERE p.epoch <> s.epoch").fetchone()[0]
    check("passes recomputed once per event", f"{len(events) - len(not_once)}/{len(events)}",
          bool(events) and not not_once and not phantom and roles == [ROLE] and stale == 0,
          f"passes_log rows per event = 1, computed_by {','.join(roles) or '-'}; "
          f"in-database handler, exactly-once effect")

    if rolled_back:
        ids = rolled_back["events"]
        leftovers = conn.execute(
            "SELECT (SELECT count(*) FROM pgq.events WHERE id = ANY (%(e)s))"
            "     + (SELECT count(*) FROM pgq.jobs WHERE id = ANY (%(j)s))"
            "     + (SELECT count(*) FROM pgq.dead_jobs WHERE id = ANY (%(j)s))"
            "     + (SELECT count(*) FROM passes_log WHERE event_id = ANY (%(e)s))"
            "     + (SELECT count(*) FROM alerts WHERE event_id = ANY (%(e)s))",
            {"e": ids, "j": rolled_back["jobs"]}).fetchone()[0]
        check("rolled-back refresh", f"{leftovers} left",
              leftovers == 0 and rolled_back["events_left"] == 0 and rolled_back["jobs_left"] == 0
              and rolled_back["unchanged"] and len(ids) == rolled_back["changes"] > 0
              and len(rolled_back["jobs"]) == 2 * len(ids),
              f"refresh {rolled_back['n']}: events {', '.join(map(str, ids))} and their "
              f"{len(rolled_back['jobs'])} jobs left no row, elements unchanged")
    else:
        check("rolled-back refresh", "none", False, f"refresh {CRASH_REFRESH} did not crash")

    flaky_events = [e for e in events if e[1] == FLAKY]
    alert_failures = [f for f in failures if f[3] == ALERTS_QUEUE]
    other_failures = [f for f in failures if f[3] != ALERTS_QUEUE]
    dead = conn.execute("SELECT count(*) FROM pgq.dead_jobs WHERE queue = ANY (%s)",
                        (list(QUEUES),)).fetchone()[0]
    flaky_ok = (len(flaky_events) == 1 and flaky_events[0][5] == 1 and flaky_events[0][6] == "2"
                and len(alert_failures) == 1 and alert_failures[0][2] == 1
                and alert_failures[0][4] == "ground station API timeout"
                and alert_failures[0][5].startswith("retried")
                and all(e[5] == 1 and e[6] == "1" for e in events if e[1] != FLAKY))
    flaky_job = alert_failures[0][1] if alert_failures else "?"
    check(f"{name_of(FLAKY)} alert", "attempt 2" if flaky_ok else "?",
          flaky_ok and not other_failures and dead == 0,
          f"job {flaky_job} failed once (server log), succeeded on its retry; one alert per "
          f"event; {dead} dead jobs")
    pending = conn.execute("SELECT count(*) FROM pgq.jobs j JOIN pgq.queues q USING (queue_id)"
                           " WHERE q.name = ANY (%s)", (list(QUEUES),)).fetchone()[0]
    check("satellite jobs pending/running", pending, pending == 0 and not timed_out,
          f"queues {', '.join(QUEUES)} drained")
    return checks
