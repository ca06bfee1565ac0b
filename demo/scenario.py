#!/usr/bin/env python3
"""pgq_cpp demo: welcome emails for a signup form, a CRM, satellites, tenants sharing a queue.

Run by `make demo` (scripts/demo.sh) against a throwaway cluster, with
Debian's python3-psycopg (psycopg 3). This file is the entry point: it holds
the welcome-email story (steps 1-3 below), the final report (step 7) and
main(), and re-runs itself with --crash-worker as the worker that gets killed.
The CRM scene (step 4) is in crm.py, the satellite scene (step 5) in
satellites.py, the tenants scene (step 6) in tenants.py; the console,
colours, connections and table printing that they all use are in common.py.
While the scenes run, live.py samples pgq.queue_stats (and the tenants'
jobs done): a live table at the bottom of a terminal, one summary line per
scene, and at the end chart.py draws the run as demo/out/run.png. The
story:

  1. A worker process claims a job with a 3 second lease and is killed with
     SIGKILL. The job stays 'running' until its lease runs out; pgq_cpp's
     maintenance worker (a background worker inside the server, no cron job)
     makes it ready again and another worker completes it as attempt 2. The
     demo shows the worker's lines from the server log as they appear.
  2. Two producers sign users up: INSERT INTO users and pgq.enqueue in ONE
     transaction. A duplicate signup fails at COMMIT, and its job disappears
     with the rolled-back user.
  3. Three workers claim, "send" (sleep) and record the delivery in the same
     transaction as pgq.complete. One address always bounces: pgq.fail retries
     it with backoff until it lands in pgq.dead_jobs.
  4. The same database runs the sales team's CRM, each race with several
     connections released at once by a barrier: new WhatsApp conversations
     go to 4 sellers in turn with pgq.assign (a customer writing twice gets
     one seller, a seller at lunch gets nothing new), delivery receipts
     arrive out of order (pgq.advance only climbs), two operators set the AI
     agent at once (pgq.set_switch: last write wins) and an invitation is
     accepted twice at once (pgq.once: one true).
  5. The same database runs a satellite-pass backend, as a non-superuser
     role: a schedule fires a refresh job every second; a worker updates the
     satellites whose orbits changed and publishes one event per change in
     the same transaction (one refresh crashes before COMMIT: no event, no
     job); in-database handlers run by the server's own workers recompute
     the passes and page the operators, whose API times out once (retried
     after its back-off).
  6. The same database runs a multi-tenant backend: one queue for every
     tenant, with fair turns across tenants and max_pending. acme imports
     1200 contacts in one enqueue_many; globex and initech sign up a few
     users right after; with the turns their jobs are done while acme's
     import has barely started. acme's next import would pass max_pending:
     refused whole (SQLSTATE 53400), its importer waits in
     pgq.wait_for_room and gets in once the workers made room.
  7. Final checks: every committed signup got exactly one welcome email, the
     bounce is dead-lettered, nothing was lost or duplicated; every
     conversation has one owner and spent one turn, nobody got work at lunch,
     turns went by id, ladders ended at their top step, the switch holds the
     last committed write, each invitation was accepted once; the schedule
     never ran twice at once, every orbit change has one event and one
     recomputation, the rolled-back refresh left nothing, the flaky alert
     succeeded on its retry; every tenant job was done once (the retried
     import's too), globex's before acme's import reached 10%, the import
     past max_pending was refused and then let in, and the count max_pending
     keeps matches the tables. Exit status 1 otherwise.
"""

import argparse
import os
import random
import re
import signal
import subprocess
import sys
import threading
import time

from chart import draw_chart
from common import BOLD, DIM, GREEN, RED, RESET, TERMINAL, connect, errors, out, query_table
from crm import crm_scene
from live import Monitor
from satellites import satellites_scene
from tenants import tenants_scene

QUEUE = "welcome_email"
MAX_ATTEMPTS = 4
CRASH_EMAIL = "carol@example.com"   # her job is held by the worker that dies
POISON_EMAIL = "bounce@example.invalid"
CRASH_LEASE = 3                     # seconds
WORKER_LEASE = "30 seconds"
PRODUCERS = 2
SIGNUPS_PER_PRODUCER = 70
WORKERS = 3
CLAIM_BATCH = 3
DEADLINE = 90                       # seconds; the scenario takes about 15

FIRST_NAMES = ["alice", "bob", "dave", "erin", "frank", "grace", "heidi", "ivan", "judy",
               "mallory", "niaj", "olivia", "peggy", "rupert", "sybil", "trent", "victor",
               "walter", "xena", "yusuf"]


class Shared:
    """What the threads tell the main thread."""

    def __init__(self):
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.errors = []              # unexpected exceptions in threads
        self.committed_jobs = {}      # job id -> email, for signups that committed
        self.rolled_back = []         # (email, user id, job id) of signups that rolled back
        self.lost_completes = 0       # pgq.complete returned false
        self.lost_fails = 0           # pgq.fail returned 'lost'
        self.requeued = 0             # expired leases requeued, from the worker's log lines
        self.expired_dead = 0
        self.producers_done = 0

    def record_error(self, who, exc):
        with self.lock:
            self.errors.append(f"{who}: {type(exc).__name__}: {exc}")
        out.event(who, f"{RED}unexpected error: {exc}{RESET}")
        self.stop.set()


# --- the application ------------------------------------------------------

SCHEMA = f"""
-- Re-runnable against the same database: start from scratch.
DROP TABLE IF EXISTS deliveries, users;
SELECT pgq.drop_queue('{QUEUE}', force => true) FROM pgq.queues WHERE name = '{QUEUE}';
-- The unique check on email is deferred to COMMIT (as with an ORM that
-- flushes late): a duplicate signup gets as far as enqueueing its job before
-- it fails, which is the case transactional enqueue is for.
CREATE TABLE users (
    id         bigserial   PRIMARY KEY,
    email      text        NOT NULL,
    name       text        NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT users_email_key UNIQUE (email) DEFERRABLE INITIALLY DEFERRED
);
-- Written by the worker in the same transaction as pgq.complete. No unique
-- constraint on purpose: the final checks count duplicates instead of
-- letting a constraint hide them.
CREATE TABLE deliveries (
    job_id       bigint      NOT NULL,
    user_id      bigint      NOT NULL REFERENCES users,
    email        text        NOT NULL,
    attempt      integer     NOT NULL,
    worker       text        NOT NULL,
    delivered_at timestamptz NOT NULL DEFAULT now()
);
SELECT pgq.create_queue('{QUEUE}', max_attempts => {MAX_ATTEMPTS}, lease => '{WORKER_LEASE}',
                        backoff_base => '200 ms', backoff_max => '1 s',
                        keep_completed => '1 hour');
"""


def signup(conn, email, name, attempt_info=None):
    """Creates the user and enqueues their welcome email in ONE transaction.

    attempt_info, if given, receives the ids created inside the transaction,
    so that a signup that fails at COMMIT can still tell what it had created.
    """
    info = attempt_info if attempt_info is not None else {}
    with conn.transaction():
        info["user_id"] = conn.execute(
            "INSERT INTO users (email, name) VALUES (%s, %s) RETURNING id",
            (email, name)).fetchone()[0]
        info["job_id"] = conn.execute(
            "SELECT pgq.enqueue(%s, jsonb_build_object('user_id', %s::bigint, 'email', %s::text))",
            (QUEUE, info["user_id"], email)).fetchone()[0]
    return info["user_id"], info["job_id"]


class Bounce(Exception):
    pass


def send_welcome_email(email, rng):
    """Pretends to talk to an SMTP server."""
    time.sleep(rng.uniform(0.15, 0.45))
    if email.endswith(".invalid"):
        raise Bounce("550 5.1.1 <%s>: mailbox unavailable" % email)


def jobs_anywhere(conn, job_id):
    """How many rows job_id has anywhere (pending/running, delivered, dead)."""
    return conn.execute(
        "SELECT (SELECT count(*) FROM pgq.jobs WHERE id = %(id)s)"
        "     + (SELECT count(*) FROM deliveries WHERE job_id = %(id)s)"
        "     + (SELECT count(*) FROM pgq.dead_jobs WHERE id = %(id)s)",
        {"id": job_id}).fetchone()[0]


# --- threads --------------------------------------------------------------

def producer(dsn, shared, index, duplicate_email):
    who = f"producer-{index}"
    rng = random.Random(100 + index)
    try:
        with connect(dsn) as conn:
            for i in range(SIGNUPS_PER_PRODUCER):
                if shared.stop.is_set():
                    return
                if index == 1 and i == SIGNUPS_PER_PRODUCER // 4:
                    email, name = POISON_EMAIL, "Bounce"
                else:
                    first = FIRST_NAMES[(i * PRODUCERS + index) % len(FIRST_NAMES)]
                    email, name = f"{first}.{index}.{i}@example.com", first.capitalize()
                _, job_id = signup(conn, email, name)
                with shared.lock:
                    shared.committed_jobs[job_id] = email
                if email == POISON_EMAIL:
                    out.event(who, f"signup {email}: job {job_id} (this address always bounces)")

                if index == 2 and i == SIGNUPS_PER_PRODUCER // 3:
                    duplicate_signup(conn, shared, who, duplicate_email)
                time.sleep(rng.uniform(0.05, 0.25))
    except Exception as exc:  # noqa: BLE001 - reported, fails the demo
        shared.record_error(who, exc)
    finally:
        with shared.lock:
            shared.producers_done += 1


def duplicate_signup(conn, shared, who, email):
    info = {}
    try:
        signup(conn, email, "Carol again", info)
    except errors.UniqueViolation as exc:
        left = jobs_anywhere(conn, info["job_id"])
        users = conn.execute("SELECT count(*) FROM users WHERE id = %s",
                             (info["user_id"],)).fetchone()[0]
        with shared.lock:
            shared.rolled_back.append((email, info["user_id"], info["job_id"], left + users))
        constraint = exc.diag.constraint_name or "unique"
        out.event(who, f"signup {email} AGAIN: INSERT user {info['user_id']}, enqueue job "
                       f"{info['job_id']}, COMMIT fails ({constraint})")
        out.event("", f"rolled back together: rows left for job {info['job_id']}: {left}, "
                      f"for user {info['user_id']}: {users}")
        return
    raise AssertionError(f"the duplicate signup of {email} committed")


def worker(dsn, shared, index):
    who = f"worker-{index}"
    rng = random.Random(200 + index)
    try:
        with connect(dsn) as conn:
            while not shared.stop.is_set():
                # Up to CLAIM_BATCH jobs, each leased for WORKER_LEASE; waits
                # up to 500 ms for one to appear. Autocommit: the claim
                # commits at once, so the lease is visible to everyone.
                jobs = conn.execute(
                    "SELECT id, payload, attempt, max_attempts"
                    "  FROM pgq.claim(%s, %s, %s::interval, '500 ms')",
                    (QUEUE, CLAIM_BATCH, WORKER_LEASE)).fetchall()
                for job_id, payload, attempt, max_attempts in jobs:
                    handle(conn, shared, who, rng, job_id, payload, attempt, max_attempts)
    except Exception as exc:  # noqa: BLE001 - reported, fails the demo
        shared.record_error(who, exc)


def handle(conn, shared, who, rng, job_id, payload, attempt, max_attempts):
    email = payload["email"]
    try:
        send_welcome_email(email, rng)
    except Bounce as exc:
        with conn.transaction():
            outcome = conn.execute("SELECT pgq.fail(%s, %s, %s)",
                                   (job_id, attempt, str(exc))).fetchone()[0]
            retry_in = conn.execute(
                "SELECT extract(epoch FROM run_at - pgq.clock())::float8 FROM pgq.jobs"
                " WHERE id = %s", (job_id,)).fetchone()
        what = f"job {job_id} {email} attempt {attempt}/{max_attempts} failed:"
        if outcome == "retry":
            out.event(who, f"{what} retry in {retry_in[0]:.2f} s")
        elif outcome == "dead":
            out.event(who, f"{what} out of attempts, moved to pgq.dead_jobs")
        else:
            with shared.lock:
                shared.lost_fails += 1
            out.event(who, f"{RED}{what} pgq.fail says '{outcome}'{RESET}")
        return

    # The delivery record and the completion commit together: either both
    # happen or neither does.
    try:
        with conn.transaction():
            conn.execute(
                "INSERT INTO deliveries (job_id, user_id, email, attempt, worker)"
                " VALUES (%s, %s, %s, %s, %s)",
                (job_id, payload["user_id"], email, attempt, who))
            # The result is kept with the job for the queue's keep_completed:
            # pgq.job(id) answers "was the welcome email sent?".
            done = conn.execute(
                "SELECT pgq.complete(%s, %s, jsonb_build_object('sent_to', %s::text, 'by', %s::text))",
                (job_id, attempt, email, who)).fetchone()[0]
            if not done:
                raise LeaseLost()
    except LeaseLost:
        with shared.lock:
            shared.lost_completes += 1
        out.event(who, f"{RED}job {job_id} attempt {attempt}: pgq.complete returned false "
                       f"(lease lost), delivery rolled back{RESET}")
        return
    if attempt > 1:
        out.event(who, f"job {job_id} {email} claimed again as attempt {attempt}: "
                       f"{GREEN}delivered{RESET}")


class LeaseLost(Exception):
    pass


# "pgq maintenance in database "shop": 1 expired leases requeued, 0 dead-lettered, ..."
WORKER_LINE = re.compile(r'pgq maintenance in database "[^"]*": (\d+) expired leases requeued, '
                         r'(\d+) dead-lettered')


def maintenance(server_log, offset, shared):
    """Follows the server log: the maintenance worker logs one line per pass
    that did something (and nothing for idle passes)."""
    who = "maintenance"
    try:
        with open(server_log, encoding="utf-8", errors="replace") as log:
            log.seek(offset)
            while not shared.stop.wait(0.2):
                for line in log:
                    match = WORKER_LINE.search(line)
                    if not match:
                        continue
                    requeued, dead = int(match.group(1)), int(match.group(2))
                    with shared.lock:
                        shared.requeued += requeued
                        shared.expired_dead += dead
                    out.event(who, "server log: " + line.split("LOG:", 1)[-1].strip())
    except Exception as exc:  # noqa: BLE001 - reported, fails the demo
        shared.record_error(who, exc)


def progress(dsn, shared):
    """The queue's counts every second, as event lines: section 2's record
    in a log, when stdout is not a terminal and there is no live view."""
    who = "queue"
    try:
        with connect(dsn) as conn:
            while not shared.stop.wait(1.0):
                r = conn.execute(
                    "SELECT ready, scheduled, running, expired, dead, done_recent"
                    "  FROM pgq.queue_stats WHERE queue = %s", (QUEUE,)).fetchone()
                out.event(who, f"{DIM}ready {r[0]:3}  scheduled {r[1]:2}  running {r[2]:2}  "
                               f"expired {r[3]:2}  dead {r[4]:2}  done {r[5]:3}{RESET}")
    except Exception as exc:  # noqa: BLE001 - reported, fails the demo
        shared.record_error(who, exc)


# --- the crashing worker ----------------------------------------------------

def crash_worker_main(dsn):
    """Runs in a child process: claims one job, then 'sends' until killed."""
    with connect(dsn) as conn:
        row = conn.execute(
            "SELECT id, attempt, to_char(lease_until, 'HH24:MI:SS.MS')"
            "  FROM pgq.claim(%s, 1, %s::interval)",
            (QUEUE, f"{CRASH_LEASE} seconds")).fetchone()
        if row is None:
            print("NOTHING", flush=True)
            return 1
        print(f"CLAIMED {row[0]} {row[1]} {row[2]}", flush=True)
        time.sleep(3600)  # a very slow SMTP server; SIGKILL arrives first
    return 0


def crash_story(dsn, conn):
    out.heading("1. A worker dies while holding a job")
    user_id, job_id = signup(conn, CRASH_EMAIL, "Carol")
    out.line(f"signup {CRASH_EMAIL}: user {user_id} and job {job_id}, in one transaction")
    child = subprocess.Popen(
        [sys.executable, os.path.abspath(__file__), "--dsn", dsn, "--crash-worker"],
        stdout=subprocess.PIPE, text=True)
    try:
        line = child.stdout.readline().split()
        if not line or line[0] != "CLAIMED" or int(line[1]) != job_id:
            raise RuntimeError(f"the crash worker did not claim job {job_id}: {line}")
        out.line(f"worker process {child.pid} claims job {job_id}: attempt {line[2]}, "
                 f"lease {CRASH_LEASE} s (until {line[3]}), starts sending...")
        time.sleep(0.5)
    finally:
        child.kill()  # SIGKILL: no cleanup, no goodbye to the server
        child.wait()
        child.stdout.close()
    state = conn.execute("SELECT state FROM pgq.jobs WHERE id = %s", (job_id,)).fetchone()[0]
    out.line(f"kill -9 {child.pid}: job {job_id} is still '{'running' if state == 'r' else state}'"
             f" and nobody will finish it.")
    out.line("Once its lease runs out, the maintenance worker inside the server makes it "
             "ready again.")
    return job_id


# --- the report -------------------------------------------------------------

def final_report(conn, shared, crash_job_id, scene_checks=()):
    out.heading("6. Where the welcome emails ended up")
    out.line(f"{DIM}SELECT * FROM pgq.queue_stats;{RESET}")
    query_table(conn, "SELECT * FROM pgq.queue_stats")
    out.line()
    out.line(f"{DIM}SELECT id, payload->>'email' AS email, attempts, reason, last_error "
             f"FROM pgq.dead_jobs WHERE queue = '{QUEUE}';{RESET}")
    query_table(conn, "SELECT id, payload->>'email' AS email, attempts, reason, last_error"
                      "  FROM pgq.dead_jobs WHERE queue = %s ORDER BY id", (QUEUE,))
    out.line()
    out.line(f"{DIM}SELECT id, state, attempt, result, last_error "
             f"FROM pgq.list_jobs('{QUEUE}', max => 5);{RESET}")
    query_table(conn, "SELECT id, state, attempt, result, last_error"
                      "  FROM pgq.list_jobs(%s, max => 5)", (QUEUE,))

    checks = []

    def check(label, value, ok, note=""):
        checks.append((label, value, ok, note))

    committed = dict(shared.committed_jobs)
    # pgq keeps counts of finished jobs (pgq.finished); which job finished at
    # which attempt is the application's record, written with pgq.complete.
    # Only this queue's: the satellite scene completes jobs of its own.
    finished_count = conn.execute(
        "SELECT COALESCE(sum(f.jobs), 0) FROM pgq.finished f JOIN pgq.queues q USING (queue_id)"
        " WHERE q.name = %s", (QUEUE,)).fetchone()[0]
    dead = {row[0]: row[1:] for row in conn.execute(
        "SELECT id, payload->>'email', attempts, reason FROM pgq.dead_jobs WHERE queue = %s",
        (QUEUE,)).fetchall()}
    pending = conn.execute("SELECT count(*) FROM pgq.jobs j JOIN pgq.queues q USING (queue_id)"
                           " WHERE q.name = %s", (QUEUE,)).fetchone()[0]
    deliveries = conn.execute("SELECT job_id, user_id, attempt FROM deliveries").fetchall()
    delivered_jobs = {}
    for job_id, _user, attempt in deliveries:
        delivered_jobs.setdefault(job_id, []).append(attempt)
    done = {job_id: attempts[-1] for job_id, attempts in delivered_jobs.items()}
    users = conn.execute("SELECT count(*) FROM users").fetchone()[0]
    dup_users = conn.execute(
        "SELECT count(*) FROM (SELECT user_id FROM deliveries GROUP BY user_id"
        " HAVING count(*) > 1) d").fetchone()[0]
    undelivered_users = conn.execute(
        "SELECT count(*) FROM users u WHERE u.email <> %s"
        "   AND NOT EXISTS (SELECT FROM deliveries d WHERE d.user_id = u.id)",
        (POISON_EMAIL,)).fetchone()[0]

    dup_job_ids = sorted(j for j, a in delivered_jobs.items() if len(a) > 1)
    dup_jobs = len(dup_job_ids)
    finished = set(done) | set(dead)
    lost = [j for j in committed if j not in finished] if pending == 0 else list(committed)
    phantom = [j for j in finished if j not in committed]
    mismatched = finished_count != len(deliveries)
    rolled_back_left = sum(r[3] for r in shared.rolled_back)
    poison_dead = [d for d in dead.values() if d[0] == POISON_EMAIL]

    check("signups committed", users, users == len(committed))
    check("signups rolled back", len(shared.rolled_back), len(shared.rolled_back) == 1,
          f"rows left behind: {rolled_back_left}")
    check("jobs enqueued", len(committed), True)
    check("emails delivered", len(deliveries), len(deliveries) == len(done) == len(committed) - 1,
          "one per completed job, recorded with pgq.complete")
    check("dead jobs", len(dead),
          len(dead) == 1 and poison_dead == [(POISON_EMAIL, MAX_ATTEMPTS, "exhausted")],
          f"{POISON_EMAIL}, {MAX_ATTEMPTS} attempts, exhausted")
    crash_attempts = done.get(crash_job_id)
    check("crashed worker's job", f"attempt {crash_attempts}",
          crash_attempts == 2 and delivered_jobs.get(crash_job_id) == [2],
          f"job {crash_job_id} requeued by the maintenance worker, delivered once")
    check("requeued by the worker", shared.requeued, shared.requeued == 1 and shared.expired_dead == 0,
          "from its lines in the server log")
    check("still pending/running", pending, pending == 0)
    check("lost jobs", len(lost) + undelivered_users + len(phantom) + shared.lost_completes
          + shared.lost_fails + rolled_back_left,
          not lost and not undelivered_users and not phantom and not shared.lost_completes
          and not shared.lost_fails and not rolled_back_left)
    check("duplicated deliveries", max(dup_jobs, dup_users), dup_jobs == 0 and dup_users == 0,
          "no job and no user delivered twice")
    check("completions counted by pgq", finished_count, not mismatched,
          "pgq.finished agrees with the delivery rows")
    kept = dict(conn.execute(
        "SELECT state, count(*) FROM pgq.list_jobs(%s, max => 10000) GROUP BY state",
        (QUEUE,)).fetchall())
    check("jobs pgq.job still knows", sum(kept.values()),
          kept.get("done") == len(deliveries) and kept.get("dead") == len(dead),
          f"{kept.get('done', 0)} done with their result, {kept.get('dead', 0)} dead (keep_completed)")
    checks.extend(scene_checks)
    check("thread errors", len(shared.errors), not shared.errors)

    out.heading("Summary")
    width = max(len(c[0]) for c in checks)
    for label, value, ok, note in checks:
        mark = f"{GREEN}ok{RESET}" if ok else f"{RED}FAILED{RESET}"
        note = f"  {DIM}{note}{RESET}" if note else ""
        out.line(f"{label:<{width}}  {str(value):>10}  {mark}{note}")
    for err in shared.errors:
        out.line(f"{RED}{err}{RESET}")
    if lost:
        out.line(f"{RED}lost job ids: {sorted(lost)[:20]}{RESET}")
    if dup_job_ids:
        out.line(f"{RED}job ids delivered more than once: {dup_job_ids[:20]}{RESET}")
    if mismatched:
        out.line(f"{RED}pgq counted {finished_count} completions, the workers recorded "
                 f"{len(deliveries)}{RESET}")
    return all(c[2] for c in checks)


# --- main -------------------------------------------------------------------

def signup_story(dsn, conn, shared, server_log, log_offset, crash_job_id):
    """Section 2: producers and workers until the queue is empty. Returns
    whether it gave up at DEADLINE."""
    out.heading(f"2. {PRODUCERS} producers sign users up while {WORKERS} workers send emails")
    out.line(f"{DIM}each signup: INSERT INTO users + pgq.enqueue in one transaction; "
             f"each delivery: INSERT INTO deliveries + pgq.complete in one transaction{RESET}")
    out.line()
    out.restart_clock()
    threads = [threading.Thread(target=maintenance, args=(server_log, log_offset, shared), daemon=True)]
    if not TERMINAL:
        # On a terminal the live view (live.py) shows the queue instead.
        threads.append(threading.Thread(target=progress, args=(dsn, shared), daemon=True))
    threads += [threading.Thread(target=worker, args=(dsn, shared, i), daemon=True)
                for i in range(1, WORKERS + 1)]
    producers = [threading.Thread(target=producer, args=(dsn, shared, i, CRASH_EMAIL),
                                  daemon=True) for i in range(1, PRODUCERS + 1)]
    for t in threads + producers:
        t.start()

    with shared.lock:
        shared.committed_jobs[crash_job_id] = CRASH_EMAIL
    deadline = time.monotonic() + DEADLINE
    timed_out = False
    while not shared.stop.is_set():
        time.sleep(0.2)
        with shared.lock:
            producing = shared.producers_done < PRODUCERS
        if not producing and conn.execute("SELECT count(*) FROM pgq.jobs").fetchone()[0] == 0:
            break
        if time.monotonic() > deadline:
            timed_out = True
            out.event("main", f"{RED}gave up after {DEADLINE} s: jobs are still "
                              f"pending or running{RESET}")
            break
    shared.stop.set()
    for t in threads + producers:
        t.join(timeout=10)
    out.event("main", "queue empty, producers done: stopping threads")
    return timed_out


def run(dsn, server_log):
    shared = Shared()
    monitor = Monitor(dsn, shared.record_error)
    log_offset = os.path.getsize(server_log)  # the worker's lines from here on
    with connect(dsn) as conn:
        out.heading(f"pgq_cpp demo: a signup form sends welcome emails through queue '{QUEUE}'")
        conn.execute(SCHEMA)
        out.line(f"tables users and deliveries created; queue '{QUEUE}': max_attempts "
                 f"{MAX_ATTEMPTS}, backoff 200 ms doubling up to 1 s, lease {WORKER_LEASE}")

        # The live view runs through the scenes; the report after them reads
        # a queue that no longer moves.
        try:
            monitor.start("1 crash")
            crash_job_id = crash_story(dsn, conn)
            monitor.scene("2 signups")
            timed_out = signup_story(dsn, conn, shared, server_log, log_offset, crash_job_id)
            monitor.scene("3 CRM")
            crm_checks = crm_scene(dsn, conn, shared)
            monitor.scene("4 satellites")
            satellite_checks = satellites_scene(dsn, conn, shared, server_log)
            monitor.scene("5 tenants")
            tenant_checks = tenants_scene(dsn, conn, shared, monitor)
        finally:
            monitor.stop()
        chart = draw_chart(monitor.history, monitor.scenes, monitor.tracks)
        ok = final_report(conn, shared, crash_job_id,
                          crm_checks + satellite_checks + tenant_checks) and not timed_out

    explore(dsn, chart)
    out.line()
    if ok:
        out.line(f"{GREEN}{BOLD}demo OK{RESET}: nothing lost, nothing duplicated, "
                 f"no race lost in the CRM, every orbit change recomputed once, "
                 f"every tenant served in turn")
        return 0
    out.line(f"{RED}{BOLD}demo FAILED{RESET}: see the checks above")
    return 1


def explore(dsn, chart):
    """Where to look next: psql, the chart of the run, how to stop."""
    host = dict(p.split("=", 1) for p in dsn.split())
    out.heading("Explore")
    out.line(f"psql -h {host['host']} -p {host['port']} -U postgres {host['dbname']}")
    out.line(f"{DIM}e.g. SELECT * FROM pgq.queue_stats; SELECT * FROM pgq.dead_jobs; "
             f"SELECT pgq.retry_dead({QUEUE!r});{RESET}")
    out.line(f"{DIM}     SELECT * FROM pgq.running_jobs; SELECT * FROM pgq.workers; "
             f"SELECT pgq.metrics();{RESET}")
    out.line(f"{DIM}     SELECT id, state, attempt, result FROM pgq.list_jobs({QUEUE!r}, 'done'); "
             f"SELECT * FROM pgq.job(1);{RESET}")
    out.line(f"{DIM}     SELECT owner, count(*) FROM pgq.assignments GROUP BY 1; "
             f"SELECT * FROM pgq.ladders; SELECT * FROM pgq.switches;{RESET}")
    out.line(f"{DIM}     SELECT * FROM pgq.schedules; SELECT * FROM pgq.schedule_runs; "
             f"SELECT * FROM passes_log; SELECT * FROM alerts;{RESET}")
    out.line(f"{DIM}     SELECT * FROM pgq.queue_settings('tenant_jobs'); "
             f"SELECT tenant, count(*) FROM tenant_work GROUP BY 1;{RESET}")
    for line in chart:
        out.line(line)
    out.line(f"stop the demo cluster: bash scripts/demo.sh stop   "
             f"{DIM}(runs pg_ctl -D {host['host']}/data stop as postgres, "
             f"deletes {host['host']}){RESET}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dsn", default="host=/tmp/pgq_demo port=55450 user=postgres dbname=shop")
    parser.add_argument("--server-log", default="/tmp/pgq_demo/server.log",
                        help="the cluster's log, where the maintenance worker reports its passes")
    parser.add_argument("--crash-worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.crash_worker:
        return crash_worker_main(args.dsn)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        return run(args.dsn, args.server_log)
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
