"""The transactional outbox end to end: the reactive example of
docs/schedules-and-outbox.md, against a real preloaded server.

A table of satellites; an update of a satellite's TLE publishes
'orbit_changed' in the same transaction; two queues subscribe to the topic:

- 'predictions' has an in-database handler, recompute_predictions(job), run by
  pgq_cpp's 'pgq handler' background workers: it deletes the satellite's
  predicted passes and inserts them again from the satellite's *current* TLE
  (idempotent), and logs the run in recompute_log, all in the transaction
  that completes the job (exactly-once effect);
- 'notifications' has no handler: an "external client" (a Python thread with
  its own connection) claims with wait, records what it got and completes.

Runs like test_concurrency.py (same DSN, same fresh-extension setUp, whose
base class and helpers it reuses). Every wait has a deadline.
"""

import datetime
import hashlib
import threading
import time

import psycopg
from psycopg.types.json import Jsonb

from test_concurrency import DSN, HANG, PgqTestCase

TOPIC = "orbit_changed"
STATIONS = ["madrid", "santiago", "svalbard"]
EPOCH = datetime.datetime(2026, 1, 1, tzinfo=datetime.timezone.utc)
# ISS, Hubble, NOAA-19, NOAA-20, Aqua, Terra, Landsat 8, Landsat 9.
SATELLITES = [25544, 20580, 33591, 43013, 27424, 25994, 39084, 49260]

SETUP_SQL = r"""
CREATE TABLE satellites (
    norad_id integer PRIMARY KEY,
    tle      text    NOT NULL);
CREATE TABLE predictions (
    norad_id integer     NOT NULL REFERENCES satellites,
    station  text        NOT NULL,
    pass_at  timestamptz NOT NULL,
    PRIMARY KEY (norad_id, station));
CREATE TABLE recompute_log (
    event_id bigint  NOT NULL,
    norad_id integer NOT NULL,
    job_id   bigint  NOT NULL,
    attempt  integer NOT NULL,
    tle      text    NOT NULL,
    who      name    NOT NULL DEFAULT current_user,
    at       timestamptz NOT NULL DEFAULT clock_timestamp());
-- Satellites whose recompute fails on its first attempt (test of retries).
CREATE TABLE flaky (norad_id integer PRIMARY KEY);

-- The "orbit propagator": one pass per ground station, a deterministic
-- function of the TLE (the test recomputes it in Python).
CREATE FUNCTION predict(tle text) RETURNS TABLE (station text, pass_at timestamptz)
LANGUAGE sql IMMUTABLE AS $$
  SELECT st, '2026-01-01 00:00:00+00'::timestamptz
             + (('x' || substr(md5(tle || '/' || st), 1, 8))::bit(32)::bigint % 86400)
               * interval '1 second'
    FROM unnest(ARRAY['madrid', 'santiago', 'svalbard']) AS st
$$;

CREATE FUNCTION recompute_predictions(job pgq.claimed_job) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
  sat integer := (job.payload->'payload'->>'norad_id')::integer;
  current_tle text;
BEGIN
  IF job.attempt = 1 AND EXISTS (SELECT 1 FROM flaky WHERE norad_id = sat) THEN
    RAISE EXCEPTION 'propagator unavailable for satellite %', sat;
  END IF;
  -- The satellite's current TLE, whatever the event said; the row lock
  -- serialises two recomputes of one satellite, so the DELETE of the second
  -- sees the rows the first inserted.
  SELECT tle INTO STRICT current_tle FROM satellites WHERE norad_id = sat FOR UPDATE;
  DELETE FROM predictions WHERE norad_id = sat;
  INSERT INTO predictions (norad_id, station, pass_at)
    SELECT sat, p.station, p.pass_at FROM predict(current_tle) p;
  INSERT INTO recompute_log (event_id, norad_id, job_id, attempt, tle)
    VALUES ((job.payload->>'event_id')::bigint, sat, job.id, job.attempt, current_tle);
END
$$;
"""

CLEANUP_SQL = """
DROP FUNCTION IF EXISTS recompute_predictions(pgq.claimed_job);
DROP FUNCTION IF EXISTS predict(text);
DROP TABLE IF EXISTS predictions, recompute_log, flaky, satellites;
"""


def tle_of(norad_id, version):
    return f"1 {norad_id:05d}U v{version}"


def expected_predictions(norad_id, tle):
    """What predict() gives, computed independently of the database."""
    rows = set()
    for station in STATIONS:
        h = int(hashlib.md5(f"{tle}/{station}".encode()).hexdigest()[:8], 16)
        rows.add((norad_id, station, EPOCH + datetime.timedelta(seconds=h % 86400)))
    return rows


class ExternalClient:
    """The 'notifications' consumer: claims with wait on its own connection,
    records every job it got (id, attempt, payload) and completes it, or fails
    the first attempt of the jobs fail_first(payload) picks."""

    def __init__(self, test, fail_first=lambda payload: False):
        self.conn = test.connect()
        self.stop = threading.Event()
        self.fail_first = fail_first
        self.received = []  # (job id, attempt, payload, outcome)
        self.lock = threading.Lock()
        self.task = test.spawn(self.run, "external client")

    def run(self):
        while not self.stop.is_set():
            rows = self.conn.execute(
                "SELECT id, attempt, payload FROM pgq.claim('notifications', 5,"
                " lease => '1 minute', wait => '200 ms')"
            ).fetchall()
            for job_id, attempt, payload in rows:
                if attempt == 1 and self.fail_first(payload):
                    outcome = self.conn.execute(
                        "SELECT pgq.fail(%s, %s, 'push gateway timeout')", (job_id, attempt)
                    ).fetchone()[0]
                else:
                    done = self.conn.execute(
                        "SELECT pgq.complete(%s, %s)", (job_id, attempt)
                    ).fetchone()[0]
                    outcome = "done" if done else "lost"
                with self.lock:
                    self.received.append((job_id, attempt, payload, outcome))

    def got(self):
        """What the client got so far; raises what ended it, if it died."""
        if not self.task.is_alive() and self.task.error is not None:
            raise AssertionError(f"the external client died: {self.task.error!r}")
        with self.lock:
            return list(self.received)

    def finish(self):
        self.stop.set()
        self.task.value()
        return self.got()


class OutboxTest(PgqTestCase):
    def setUp(self):
        # Our handler depends on pgq.claimed_job: drop it (left over by a run
        # that was killed) before the base class drops the extension.
        if DSN:
            with psycopg.connect(DSN, autocommit=True) as conn:
                conn.execute("SET client_min_messages = warning")
                conn.execute(CLEANUP_SQL)
        super().setUp()
        self.admin.execute(SETUP_SQL)
        with self.admin.cursor() as cur:
            cur.executemany(
                "INSERT INTO satellites VALUES (%s, %s)", [(n, tle_of(n, 0)) for n in SATELLITES]
            )
        self.admin.execute(
            "INSERT INTO predictions SELECT s.norad_id, p.station, p.pass_at"
            "  FROM satellites s, predict(s.tle) p"
        )
        self.admin.execute(
            "SELECT pgq.create_queue('predictions', backoff_base => '200 ms',"
            " handler => 'public.recompute_predictions(pgq.claimed_job)')"
        )
        self.admin.execute("SELECT pgq.create_queue('notifications', backoff_base => '1 second')")
        self.admin.execute("SELECT pgq.create_topic(%s)", (TOPIC,))
        self.admin.execute("SELECT pgq.subscribe(%s, 'predictions')", (TOPIC,))
        self.admin.execute("SELECT pgq.subscribe(%s, 'notifications')", (TOPIC,))
        self.client = None

    def tearDown(self):
        if self.client is not None:
            self.client.stop.set()
            self.client.task.join(5)
        super().tearDown()
        with psycopg.connect(DSN, autocommit=True) as conn:
            conn.execute("SET client_min_messages = warning")
            conn.execute("SET lock_timeout = '10s'")
            conn.execute(CLEANUP_SQL)

    # helpers -------------------------------------------------------------

    def current_state(self):
        """{norad_id: tle} and the set of prediction rows, as stored."""
        tles = dict(self.admin.execute("SELECT norad_id, tle FROM satellites").fetchall())
        rows = set(self.admin.execute("SELECT norad_id, station, pass_at FROM predictions"))
        return tles, rows

    def assert_predictions_follow_current_tles(self):
        tles, rows = self.current_state()
        expected = set()
        for norad_id, tle in tles.items():
            expected |= expected_predictions(norad_id, tle)
        self.assertEqual(rows - expected, set(), "predictions not derived from a current TLE")
        self.assertEqual(expected - rows, set(), "predictions missing for a current TLE")
        return tles

    def queue_jobs(self, queue):
        return self.scalar(
            "SELECT count(*) FROM pgq.jobs j JOIN pgq.queues q USING (queue_id)"
            " WHERE q.name = %s",
            (queue,),
        )

    def log_rows(self):
        return self.admin.execute(
            "SELECT event_id, norad_id, job_id, attempt, tle, who FROM recompute_log"
            " ORDER BY event_id, at"
        ).fetchall()

    def update_and_publish(self, conn, norad_id, version, commit=True, before_end=None):
        """One business transaction: the new TLE and its event, or neither.

        before_end() runs after the publish, before the commit or rollback."""
        conn.execute(
            "UPDATE satellites SET tle = %s WHERE norad_id = %s",
            (tle_of(norad_id, version), norad_id),
        )
        event_id = self.scalar(
            "SELECT pgq.publish(%s, jsonb_build_object('norad_id', %s::int, 'version', %s::int),"
            " dedupe_key => %s)",
            (TOPIC, norad_id, version, f"tle-{norad_id}-v{version}"),
            conn=conn,
        )
        if before_end is not None:
            before_end()
        if commit:
            conn.commit()
        else:
            conn.rollback()
        return event_id

    def wait_for_handler_workers(self):
        self.wait_for(
            "two 'pgq handler' workers in this database",
            lambda: self.scalar(
                "SELECT count(*) FROM pg_stat_activity"
                " WHERE backend_type = 'pgq handler' AND datname = current_database()"
            )
            == 2,
        )

    # tests ---------------------------------------------------------------

    def test_reactive_example_end_to_end(self):
        started = time.monotonic()
        self.client = ExternalClient(self)

        # Six connections, one satellite each, three TLE updates in a row,
        # each in its own transaction with its publish. All six first
        # transactions are open (updated and published) at the same time.
        # The last update of the sixth satellite rolls back after publishing.
        # The last two satellites are never updated.
        writers = 6
        rounds = 3
        rolled_back = (SATELLITES[writers - 1], rounds)
        conns = [self.connect(autocommit=False) for _ in range(writers)]
        barrier = threading.Barrier(writers)
        redeliver = self.connect()

        def write(conn, norad_id):
            outcomes = []
            for version in range(1, rounds + 1):
                commit = (norad_id, version) != rolled_back
                event_id = self.update_and_publish(
                    conn,
                    norad_id,
                    version,
                    commit=commit,
                    # every writer has published, none has committed yet
                    before_end=(lambda: barrier.wait(HANG)) if version == 1 else None,
                )
                outcomes.append((norad_id, version, event_id, commit))
            return outcomes

        tasks = [
            self.spawn(lambda c=c, n=n: write(c, n), f"writer-{n}")
            for c, n in zip(conns, SATELLITES)
        ]
        outcomes = [o for t in tasks for o in t.value(HANG)]
        committed = {(n, v): e for n, v, e, ok in outcomes if ok}
        aborted = {(n, v): e for n, v, e, ok in outcomes if not ok}
        self.assertEqual(len(committed), writers * rounds - 1)
        self.assertEqual(list(aborted), [rolled_back])
        self.assertEqual(len(set(committed.values())), len(committed), "two updates, one event id")

        # Wait until both queues are drained: every job of every event handled
        # by the workers and by the external client.
        def drained():
            return (
                self.scalar("SELECT count(*) FROM pgq.jobs") == 0
                and len(self.client.got()) >= len(committed)
            )

        self.wait_for("both queues to drain", drained)
        received = self.client.finish()

        # Every committed update has exactly one event (its own dedupe key and
        # payload), the rolled-back one none.
        events = self.admin.execute(
            "SELECT id, topic, payload, dedupe_key FROM pgq.events ORDER BY id"
        ).fetchall()
        self.assertEqual(
            sorted(events),
            sorted(
                (e, TOPIC, {"norad_id": n, "version": v}, f"tle-{n}-v{v}")
                for (n, v), e in committed.items()
            ),
        )
        (rb_event,) = aborted.values()
        self.assertNotIn(rb_event, {e[0] for e in events})

        # The business data committed with the events: the sixth satellite
        # stayed at its second TLE; the untouched ones at v0.
        tles = self.assert_predictions_follow_current_tles()
        final_version = {n: 0 for n in SATELLITES}
        for n, v in committed:
            final_version[n] = max(final_version[n], v)
        self.assertEqual(tles, {n: tle_of(n, v) for n, v in final_version.items()})
        self.assertEqual(tles[rolled_back[0]], tle_of(rolled_back[0], rounds - 1))

        # In-database handler: exactly one effect per event, on the first
        # attempt, as the queue's owner.
        log = self.log_rows()
        self.assertEqual(
            sorted((e, n) for e, n, *_ in log),
            sorted((e, n) for (n, _), e in committed.items()),
            "recompute_log: one row per committed event",
        )
        self.assertEqual({a for _, _, _, a, _, _ in log}, {1}, "a recompute was retried")
        self.assertEqual({w for *_, w in log}, {self.scalar("SELECT current_user")})
        # Each satellite's last recompute saw its final TLE.
        last_seen = {n: tle for _, n, _, _, tle, _ in sorted(log, key=lambda r: r[0])}
        self.assertEqual(last_seen, {n: tles[n] for n in last_seen})

        # External client: exactly one job per committed event, carrying the
        # event; none for the rolled-back update.
        by_event = {}
        for job_id, attempt, payload, outcome in received:
            self.assertEqual((attempt, outcome), (1, "done"), f"job {job_id}: {payload}")
            by_event.setdefault(payload["event_id"], []).append(payload)
        self.assertEqual(sorted(by_event), sorted(committed.values()))
        for (n, v), e in committed.items():
            self.assertEqual(
                by_event[e],
                [{"event_id": e, "topic": TOPIC, "payload": {"norad_id": n, "version": v}}],
            )
        self.assertNotIn(rb_event, by_event)
        self.assertEqual(len({j for j, *_ in received}), len(received))

        self.assertEqual(self.scalar("SELECT count(*) FROM pgq.jobs"), 0)
        self.assertEqual(self.scalar("SELECT count(*) FROM pgq.dead_jobs"), 0)
        stats = dict(self.admin.execute("SELECT queue, done_recent FROM pgq.queue_stats"))
        self.assertEqual(stats["predictions"], len(committed))
        self.assertEqual(stats["notifications"], len(committed))

        # An idempotent producer: publishing an event's dedupe key again (a
        # retry after an uncertain commit) returns that event and enqueues
        # nothing, seen from inside the publishing transaction.
        (n, v), event = sorted(committed.items())[0]
        again = self.connect(autocommit=False)
        self.assertEqual(
            self.scalar(
                "SELECT pgq.publish(%s, %s, dedupe_key => %s)",
                (TOPIC, Jsonb({"norad_id": n, "version": v}), f"tle-{n}-v{v}"),
                conn=again,
            ),
            event,
        )
        self.assertEqual(self.scalar("SELECT count(*) FROM pgq.jobs", conn=again), 0)
        again.commit()
        self.assertEqual(self.scalar("SELECT count(*) FROM pgq.events"), len(committed))

        # At-least-once delivery means a handler may see an old event again:
        # redeliver the first event of a satellite that moved on since (as if
        # its job had been run twice). It recomputes from the current TLE, so
        # the predictions stay right.
        (n, v), old_event = next(
            ((n, v), e) for (n, v), e in sorted(committed.items()) if v == 1
        )
        old_payload = by_event[old_event][0]
        self.assertNotEqual(tles[n], tle_of(n, 1))
        before = self.current_state()
        replay = self.enqueue(redeliver, "predictions", old_payload)
        self.wait_for(
            "the redelivered job to be handled", lambda: self.queue_jobs("predictions") == 0
        )
        self.assertEqual(self.current_state(), before, "a replayed old event changed predictions")
        self.assert_predictions_follow_current_tles()
        replayed = [r for r in self.log_rows() if r[2] == replay]
        self.assertEqual(len(replayed), 1, "the redelivered job ran")
        self.assertEqual(replayed[0][:2], (old_event, n))
        self.assertEqual(replayed[0][4], tles[n], "the replay used the current TLE")
        self.assertEqual(self.scalar("SELECT count(*) FROM pgq.dead_jobs"), 0)

        self.assertLess(time.monotonic() - started, 30)

    def test_a_retry_of_one_subscriber_never_reruns_the_other(self):
        started = time.monotonic()
        a, b = SATELLITES[0], SATELLITES[1]
        # B's in-database recompute fails its first attempt.
        self.admin.execute("INSERT INTO flaky VALUES (%s)", (b,))
        self.wait_for_handler_workers()

        writer = self.connect(autocommit=False)
        event_a = self.update_and_publish(writer, a, 1)
        event_b = self.update_and_publish(writer, b, 1)

        # The external client fails A's notification once, completes B's.
        self.client = ExternalClient(self, lambda p: p["event_id"] == event_a)

        def handled_and_notified():
            outcomes = {(p["event_id"], att, out) for _, att, p, out in self.client.got()}
            return (
                self.queue_jobs("predictions") == 0
                and (event_a, 1, "retry") in outcomes
                and (event_b, 1, "done") in outcomes
            )

        self.wait_for("the handler to run and the client to fail A once", handled_and_notified)
        # The in-database handler has run for both events.
        log = self.log_rows()
        self.assertEqual([(r[0], r[3]) for r in log], [(event_a, 1), (event_b, 2)])

        # The client's retry of A comes after its back-off and succeeds.
        self.wait_for(
            "the client's retry of A",
            lambda: any(
                p["event_id"] == event_a and att == 2 for _, att, p, _ in self.client.got()
            ),
        )
        self.wait_for("notifications to drain", lambda: self.queue_jobs("notifications") == 0)
        received = self.client.finish()
        self.assertEqual(
            sorted((p["event_id"], att, out) for _, att, p, out in received),
            sorted([(event_a, 1, "retry"), (event_a, 2, "done"), (event_b, 1, "done")]),
        )
        job_ids = {p["event_id"]: j for j, _, p, _ in received}
        self.assertEqual(len({j for j, *_ in received}), 2, "A's retry is the same job")
        self.assertEqual(len(job_ids), 2)

        # The client's retry of A did not run A's recompute again, and the
        # handler's retry of B did not notify B again (the client got B once);
        # B's failed first attempt left no trace (rolled back with the job's
        # failure). Nothing is left to run: every job is finished.
        self.assertEqual(self.log_rows(), log)
        self.assertEqual(
            [(r[0], r[1], r[3]) for r in log], [(event_a, a, 1), (event_b, b, 2)]
        )
        self.assertEqual(self.scalar("SELECT count(*) FROM pgq.jobs"), 0)
        self.assertEqual(self.scalar("SELECT count(*) FROM pgq.dead_jobs"), 0)
        stats = dict(self.admin.execute("SELECT queue, done_recent FROM pgq.queue_stats"))
        self.assertEqual(stats, {"predictions": 2, "notifications": 2, "q": 0})
        self.assert_predictions_follow_current_tles()
        self.assertLess(time.monotonic() - started, 30)


if __name__ == "__main__":
    import unittest

    unittest.main()
