"""The client side of test/t/010_chaos.pl: worker, probe and monitor processes.

    chaos_worker.py DSN DIR worker N MS  one of the 8 workers (N = 1..8), MS
                                       milliseconds of "work" per job (mean)
    chaos_worker.py DSN DIR probe        the deliberate superseded claimer
    chaos_worker.py DSN DIR monitor G    samples running jobs and their leases

DIR is the test's control directory: a file DIR/stop asks every process to
finish; DIR/pause.N asks worker N to stop between a claim and its
completion and to say so in DIR/paused.N. Each process prints one JSON line
of figures on stdout when it ends, and writes every unexpected error to
stderr ("HARD:" lines); the test asserts there are none.

Workers. A worker loops: claim 1-4 jobs of queue 'chaos' with a 2 s lease
and record each claim in chaos_claims in the same transaction (job, attempt,
worker, backend pid and backend_start, claimed_at = pgq.clock(),
lease_until); "work" (sleep) 0-2 MS ms per job; then, per job, one transaction calls
pgq.complete(id, attempt) and, only if it returned true, inserts the
completion into chaos_done (primary key: the job id) -- or, if it returned
false, records the refusal in chaos_refused. On a lost connection (kill -9,
pg_terminate_backend, crash restart, immediate shutdown) it reconnects and
goes on; the jobs it held whose claim had committed (and whose completion it
does not know to have committed) become late completions: it completes them
with their old attempt after reconnecting, a third of the time at once and
otherwise only after their lease has expired -- a superseded claimer,
unless nobody re-claimed the job meanwhile (ADR 0003 accepts that one).
A claim whose commit was not acknowledged is dropped (the worker cannot
know whether it holds the job, and its attempt number may be handed out
again).

Probe. Claims one job (ledger worker 0) and then, with its connection alive
and idle, waits until the job was claimed again by a worker (a newer
attempt in the ledger) and completes it with its old attempt: that must be
refused. Results in chaos_probe.

Monitor. Every 200 ms (skipping samples while the server is down): the
running job with the oldest lease_until and the current maintenance
worker's backend_start; a job is overdue by clock - greatest(lease_until,
worker backend_start). Prints the worst overdue, the samples where it
exceeded the grace (argument to the test, see 010_chaos.pl) and the
longest stretch without a maintenance worker while the server was up.
"""

import json
import os
import random
import sys
import time

import psycopg

LEASE_SECONDS = 2
LEASE = f"{LEASE_SECONDS} seconds"
QUEUE = "chaos"
# Where the monitor reads running jobs: pgq.jobs, or with a ring queue
# (test/t/019_ring_chaos.pl) pgq.jobs and pgq.ring_jobs (010_chaos.pl sets it).
SOURCE = os.environ.get("PGQ_CHAOS_SOURCE", "pgq.jobs")
# A process that cannot connect for this long gives up (the test then fails).
RECONNECT_SECONDS = 120


class Gone(Exception):
    """The control directory asked us to stop while we were reconnecting."""


class Client:
    def __init__(self, dsn, ctl, name):
        self.dsn = dsn
        self.ctl = ctl
        self.name = name
        self.conn = None
        self.pid = None
        self.backend_start = None
        self.stats = {"role": name, "connects": 0, "lost": 0, "hard_errors": 0}

    def flag(self, name):
        return os.path.exists(os.path.join(self.ctl, name))

    def stopping(self):
        return self.flag("stop")

    def hard(self, what):
        self.stats["hard_errors"] += 1
        print(f"HARD: {self.name}: {what}", file=sys.stderr, flush=True)

    def connect(self, give_up_on_stop=False):
        deadline = time.time() + RECONNECT_SECONDS
        while True:
            try:
                conn = psycopg.connect(self.dsn, application_name=self.name, connect_timeout=5)
                row = conn.execute(
                    "SELECT pg_backend_pid(), backend_start FROM pg_stat_activity"
                    " WHERE pid = pg_backend_pid()"
                ).fetchone()
                conn.commit()
                self.conn = conn
                self.pid, self.backend_start = row
                self.stats["connects"] += 1
                return
            except psycopg.OperationalError:
                if give_up_on_stop and self.stopping():
                    raise Gone()
                if time.time() > deadline:
                    raise
                time.sleep(0.1)

    def alive(self):
        return self.conn is not None and not self.conn.closed and not self.conn.broken

    # A statement failed with an OperationalError on a connection that is
    # still up: that is a hard error (the server refused something it should
    # not have). Returns False if the connection turned out to be gone.
    def statement_failed(self, e):
        try:
            self.conn.rollback()
        except psycopg.Error:
            return False
        if not self.alive():
            return False
        code = getattr(getattr(e, "diag", None), "sqlstate", None)
        self.hard(f"{type(e).__name__} [{code}] on a live connection: {e}")
        time.sleep(0.05)
        return True

    def lost(self):
        self.stats["lost"] += 1
        try:
            self.conn.close()
        except Exception:
            pass
        self.conn = None

    def record(self, table, job, attempt, extra_cols="", extra_vals=(), placeholders=""):
        self.conn.execute(
            f"INSERT INTO {table} (job, attempt, worker, pid, backend_start, at{extra_cols})"
            f" VALUES (%s, %s, %s, pg_backend_pid(), %s, pgq.clock(){placeholders})",
            (job, attempt, self.worker, self.backend_start, *extra_vals),
        )

    # One transaction: pgq.complete(job, attempt) and its ledger row.
    # Returns the result of complete. Raises OperationalError on a lost
    # connection (the outcome is then unknown).
    def complete(self, job, attempt, kind):
        try:
            ok = self.conn.execute("SELECT pgq.complete(%s, %s)", (job, attempt)).fetchone()[0]
            if ok:
                self.record("chaos_done", job, attempt, ", kind", (kind,), ", %s")
            else:
                self.record("chaos_refused", job, attempt, ", kind", (kind,), ", %s")
            self.conn.commit()
            return ok
        except psycopg.OperationalError:
            raise
        except psycopg.Error as e:
            # A second accepted completion (chaos_done's primary key), or
            # anything else unexpected: a hard failure, reported.
            self.hard(f"complete({job}, {attempt}) [{kind}]: {type(e).__name__}: {e}")
            self.conn.rollback()
            return None


def tally(st, ok, accepted, refused):
    """Counts what pgq.complete answered: True, False, or None (lost)."""
    if ok:
        st[accepted] += 1
    elif ok is False:
        st[refused] += 1


def run_worker(dsn, ctl, w, work_ms):
    c = Client(dsn, ctl, f"chaos_worker_{w}")
    c.worker = w
    rng = random.Random(w * 7919 + os.getpid())
    st = c.stats
    st.update(claims=0, jobs_claimed=0, completed=0, refused=0, late_accepted=0,
              late_refused=0, pauses=0, dropped_unacked_claims=0)
    in_hand = []   # (job, attempt, lease_until): claim committed, not yet completed
    orphans = []   # held when the connection was lost: completed late
    while True:
        try:
            if c.conn is None:
                c.connect()
            while orphans:
                job, attempt, lease_until = orphans[0]
                if rng.random() < 2 / 3:
                    # Only after the lease has expired (and a maintenance
                    # pass or two): by then a worker has usually re-claimed it.
                    wait = lease_until.timestamp() + 0.3 + rng.random() * 1.5 - time.time()
                    if wait > 0:
                        time.sleep(wait)
                tally(st, c.complete(job, attempt, "late"), "late_accepted", "late_refused")
                orphans.pop(0)
            if not in_hand:
                if c.stopping():
                    break
                n = rng.randint(1, 4)
                claimed = False
                rows = c.conn.execute(
                    "SELECT id, attempt, lease_until FROM pgq.claim(%s, %s, %s::interval,"
                    " '100 milliseconds')",
                    (QUEUE, n, LEASE),
                ).fetchall()
                if rows:
                    c.conn.execute(
                        "INSERT INTO chaos_claims (job, attempt, worker, pid, backend_start,"
                        " claimed_at, lease_until)"
                        " SELECT j, a, %s, pg_backend_pid(), %s, pgq.clock(), l"
                        "   FROM unnest(%s::bigint[], %s::int[], %s::timestamptz[]) AS u(j, a, l)",
                        (w, c.backend_start, [r[0] for r in rows], [r[1] for r in rows],
                         [r[2] for r in rows]),
                    )
                try:
                    c.conn.commit()
                    claimed = True
                finally:
                    if not claimed and rows:
                        st["dropped_unacked_claims"] += len(rows)
                if not rows:
                    continue
                st["claims"] += 1
                st["jobs_claimed"] += len(rows)
                in_hand = list(rows)
            if c.flag(f"pause.{w}"):
                # Between claim and complete: tell the test who we are and
                # what we hold, and wait (for the kill -9, or at most 30 s).
                st["pauses"] += 1
                job, attempt, lease_until = in_hand[0]
                tmp = os.path.join(ctl, f"paused.{w}.tmp")
                with open(tmp, "w") as f:
                    json.dump({"pid": c.pid, "backend_start": c.backend_start.isoformat(),
                               "job": job, "attempt": attempt,
                               "lease_until": lease_until.isoformat()}, f)
                os.rename(tmp, os.path.join(ctl, f"paused.{w}"))
                deadline = time.time() + 30
                while c.flag(f"pause.{w}") and time.time() < deadline:
                    time.sleep(0.02)
            while in_hand:
                job, attempt, _ = in_hand[0]
                time.sleep(rng.random() * 2 * work_ms / 1000)
                tally(st, c.complete(job, attempt, "normal"), "completed", "refused")
                in_hand.pop(0)
        except psycopg.OperationalError as e:
            if c.alive() and c.statement_failed(e):
                continue  # in_hand kept: completed on the next round
            orphans.extend(in_hand)
            in_hand = []
            c.lost()
        except Exception as e:  # noqa: BLE001 -- reported, the test fails on it
            c.hard(f"{type(e).__name__}: {e}")
            orphans.extend(in_hand)
            in_hand = []
            c.lost()
            time.sleep(0.1)
    st["completed"] += st["late_accepted"]
    return st


def run_probe(dsn, ctl):
    c = Client(dsn, ctl, "chaos_probe")
    c.worker = 0
    st = c.stats
    st.update(probes=0, refused=0, accepted=0, not_superseded=0)
    held = None  # (job, attempt) claimed by the probe, not yet completed
    time.sleep(1.0)
    while True:
        try:
            if c.conn is None:
                c.connect(give_up_on_stop=held is None)
            if held is None:
                if c.stopping():
                    break
                rows = c.conn.execute(
                    "SELECT id, attempt, lease_until FROM pgq.claim(%s, 1, %s::interval)",
                    (QUEUE, LEASE),
                ).fetchall()
                if rows:
                    job, attempt, lease_until = rows[0]
                    c.conn.execute(
                        "INSERT INTO chaos_claims (job, attempt, worker, pid, backend_start,"
                        " claimed_at, lease_until)"
                        " VALUES (%s, %s, 0, pg_backend_pid(), %s, pgq.clock(), %s)",
                        (job, attempt, c.backend_start, lease_until),
                    )
                c.conn.commit()
                if not rows:
                    time.sleep(0.2)
                    continue
                held = (job, attempt)
                st["probes"] += 1
            job, attempt = held
            # Stalled, connection alive and idle: wait for a newer claim.
            deadline = time.time() + 30
            superseded = False
            while time.time() < deadline:
                superseded = c.conn.execute(
                    "SELECT EXISTS (SELECT 1 FROM chaos_claims WHERE job = %s AND attempt > %s)",
                    (job, attempt),
                ).fetchone()[0]
                c.conn.commit()
                if superseded:
                    break
                time.sleep(0.1)
            ok = c.conn.execute("SELECT pgq.complete(%s, %s)", (job, attempt)).fetchone()[0]
            c.conn.execute(
                "INSERT INTO chaos_probe (job, attempt, superseded, result, at)"
                " VALUES (%s, %s, %s, %s, pgq.clock())",
                (job, attempt, superseded, ok),
            )
            if ok:
                c.record("chaos_done", job, attempt, ", kind", ("probe",), ", %s")
            else:
                c.record("chaos_refused", job, attempt, ", kind", ("probe",), ", %s")
            c.conn.commit()
            held = None
            st["accepted" if ok else "refused"] += 1
            if not superseded:
                st["not_superseded"] += 1
            time.sleep(0.5)
        except Gone:
            break
        except psycopg.OperationalError as e:
            if c.alive() and c.statement_failed(e):
                continue
            c.lost()
        except Exception as e:  # noqa: BLE001
            c.hard(f"{type(e).__name__}: {e}")
            c.lost()
            time.sleep(0.1)
    return st


def run_monitor(dsn, ctl, grace):
    c = Client(dsn, ctl, "chaos_monitor")
    st = c.stats
    st.update(samples=0, down=0, no_worker=0, max_overdue=0.0, max_overdue_job=None,
              violations=[], violation_count=0, longest_no_worker=0.0, running_max=0)
    no_worker_since = None
    while not c.stopping():
        t0 = time.time()
        try:
            if c.conn is None:
                c.connect(give_up_on_stop=True)
            row = c.conn.execute(
                "SELECT extract(epoch FROM pgq.clock())::float8,"
                "       (SELECT extract(epoch FROM max(backend_start))::float8"
                "          FROM pg_stat_activity WHERE backend_type = 'pgq maintenance'"
                "           AND datname = current_database()),"
                f"       (SELECT count(*) FROM {SOURCE} s WHERE state = 'r'),"
                "       j.id, j.attempt, extract(epoch FROM j.lease_until)::float8"
                "  FROM (SELECT) one LEFT JOIN LATERAL ("
                f"    SELECT id, attempt, lease_until FROM {SOURCE} s WHERE state = 'r'"
                "     ORDER BY lease_until LIMIT 1) j ON true"
            ).fetchone()
            c.conn.commit()
        except Gone:
            break
        except psycopg.OperationalError as e:
            if c.alive() and c.statement_failed(e):
                continue
            st["down"] += 1
            if c.conn is not None:
                c.lost()
            no_worker_since = None
            time.sleep(0.2)
            continue
        now, worker_start, running, job, attempt, lease_until = row
        st["samples"] += 1
        st["running_max"] = max(st["running_max"], running)
        if worker_start is None:
            st["no_worker"] += 1
            if no_worker_since is None:
                no_worker_since = now
            st["longest_no_worker"] = max(st["longest_no_worker"], now - no_worker_since)
        else:
            if no_worker_since is not None:
                # The stretch ended somewhere before this sample.
                st["longest_no_worker"] = max(st["longest_no_worker"], now - no_worker_since)
            no_worker_since = None
            if job is not None:
                overdue = now - max(lease_until, worker_start)
                if overdue > st["max_overdue"]:
                    st["max_overdue"] = overdue
                    st["max_overdue_job"] = [job, attempt]
                if overdue > grace:
                    st["violation_count"] += 1
                    if len(st["violations"]) < 10:
                        st["violations"].append(
                            {"job": job, "attempt": attempt, "overdue": round(overdue, 3),
                             "lease_until": lease_until, "worker_start": worker_start,
                             "now": now})
        time.sleep(max(0.0, 0.2 - (time.time() - t0)))
    return st


def main():
    dsn, ctl, role = sys.argv[1], sys.argv[2], sys.argv[3]
    if role == "worker":
        st = run_worker(dsn, ctl, int(sys.argv[4]), float(sys.argv[5]))
    elif role == "probe":
        st = run_probe(dsn, ctl)
    elif role == "monitor":
        st = run_monitor(dsn, ctl, float(sys.argv[4]))
    else:
        raise SystemExit(f"unknown role {role}")
    print(json.dumps(st), flush=True)


if __name__ == "__main__":
    main()
