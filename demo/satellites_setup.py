"""The satellite scene's fixed inputs, used by satellites.py: its settings, the
simulated TLE catalogue (the satellites, which refreshes change which of them,
the ground stations) and SCHEMA, the SQL that creates the `satops` role's
tables, its two in-database handlers (recompute_passes, page_operators), its
three queues and their subscriptions to 'orbit.changed'. Re-runnable: SCHEMA
first drops what an earlier run left.
"""

ROLE = "satops"
SCHEDULE = "tle-refresh"
TLE_QUEUE = "tle"
EVERY = 1                       # seconds: '@every 1 second'
PRODUCTION_SPEC = "@every 2 hours"
TOPIC = "orbit.changed"
PASSES_QUEUE = "passes"
ALERTS_QUEUE = "alerts"
QUEUES = (TLE_QUEUE, PASSES_QUEUE, ALERTS_QUEUE)
TLE_LEASE = "30 seconds"
REFRESHES = 6                   # then the schedule goes back to PRODUCTION_SPEC
CRASH_REFRESH = 3               # its first attempt rolls back after publishing
FLAKY = 40697                   # its alert fails on attempt 1
ALERT_BACKOFF = "300 milliseconds"
ALERT_MAX_ATTEMPTS = 3
SCENE_TIMEOUT = 40              # seconds; the scene takes about 14
POLL = 0.1                      # seconds between two looks of the watcher
PROPAGATION = 0.2               # seconds recompute_passes "computes": long enough to be
                                # seen running in pg_stat_activity

# norad id -> name, inclination (deg), mean motion (rev/day) at the start
SATELLITES = {
    25544: ("ISS (ZARYA)", 51.6416, 15.49950),
    20580: ("HST", 28.4699, 15.27840),
    33591: ("NOAA 19", 99.1932, 14.12800),
    40697: ("SENTINEL-2A", 98.5693, 14.30820),
    43013: ("NOAA 20", 98.7410, 14.19550),
}
# refresh number (1-based) -> satellites whose elements the catalogue changed
CHANGES = {1: [25544], 3: [20580, 33591], 4: [25544, 40697], 6: [43013, 20580]}
STATIONS = [("Svalbard", 78.2298, 15.3976), ("Madrid", 40.4314, -4.2481),
            ("Santiago", -33.1511, -70.6664)]

SCHEMA = f"""
-- Re-runnable against the same database: start from scratch.
DO $$ BEGIN CREATE ROLE {ROLE} NOLOGIN; EXCEPTION WHEN duplicate_object THEN NULL; END $$;
-- The application role creates (and so owns) its queues: the admin right on
-- every queue; it needs no privilege on pgq's tables (docs/security.md).
SELECT pgq.grant('{ROLE}', NULL, 'admin');
GRANT CREATE ON SCHEMA public TO {ROLE};
SELECT pgq.drop_queue(name, force => true) FROM pgq.queues
 WHERE name IN ('{TLE_QUEUE}', '{PASSES_QUEUE}', '{ALERTS_QUEUE}');
DELETE FROM pgq.events WHERE topic = '{TOPIC}';
DROP TABLE IF EXISTS alerts, passes_log, passes, ground_stations, satellites;
DROP FUNCTION IF EXISTS recompute_passes(pgq.claimed_job), page_operators(pgq.claimed_job);

SET ROLE {ROLE};
CREATE TABLE satellites (
    norad_id    integer     PRIMARY KEY,
    name        text        NOT NULL,
    epoch       text        NOT NULL,     -- of the elements, TLE style: YYDDD.DDDDDDDD
    inclination numeric     NOT NULL,     -- degrees
    mean_motion numeric     NOT NULL,     -- revolutions per day
    revision    integer     NOT NULL DEFAULT 0,   -- element sets applied since the start
    updated_at  timestamptz NOT NULL DEFAULT now()
);
CREATE TABLE ground_stations (
    station text    PRIMARY KEY,
    lat     numeric NOT NULL,
    lon     numeric NOT NULL
);
CREATE TABLE passes (
    norad_id      integer     NOT NULL REFERENCES satellites,
    station       text        NOT NULL REFERENCES ground_stations,
    aos           timestamptz NOT NULL,   -- acquisition of signal
    max_elevation numeric     NOT NULL,   -- degrees
    epoch         text        NOT NULL,   -- the elements the pass was computed from
    PRIMARY KEY (norad_id, station, aos)
);
-- Written by the handlers in the transaction that completes their job. No
-- unique constraint on event_id on purpose: the checks count rows instead.
CREATE TABLE passes_log (
    id          bigserial   PRIMARY KEY,
    event_id    bigint      NOT NULL,
    norad_id    integer     NOT NULL,
    job_id      bigint      NOT NULL,
    attempt     integer     NOT NULL,
    passes      integer     NOT NULL,
    computed_by text        NOT NULL DEFAULT current_user,
    at          timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE TABLE alerts (
    id       bigserial   PRIMARY KEY,
    event_id bigint      NOT NULL,
    norad_id integer     NOT NULL,
    job_id   bigint      NOT NULL,
    attempt  integer     NOT NULL,
    message  text        NOT NULL,
    sent_by  text        NOT NULL DEFAULT current_user,
    at       timestamptz NOT NULL DEFAULT clock_timestamp()
);

-- The in-database handlers: run by the 'pgq handler' background workers,
-- as the owner of the queue, in the transaction that completes the job.
CREATE FUNCTION recompute_passes(job pgq.claimed_job) RETURNS void
LANGUAGE plpgsql AS $fn$
DECLARE
    sat satellites;
    n   integer;
BEGIN
    SELECT * INTO STRICT sat FROM satellites
     WHERE norad_id = (job.payload->'payload'->>'norad_id')::integer;
    DELETE FROM passes WHERE norad_id = sat.norad_id;
    -- Orbital mechanics, demo edition: the next two passes over each station.
    INSERT INTO passes (norad_id, station, aos, max_elevation, epoch)
    SELECT sat.norad_id, g.station,
           date_trunc('minute', now())
             + make_interval(mins => (k * 1440 / sat.mean_motion
                                      + mod(sat.norad_id + (g.lon * 10)::integer, 90))::integer),
           round(mod(abs(sat.inclination * 7 + g.lat * 3 + k * 11), 80) + 10, 1),
           sat.epoch
      FROM ground_stations g, generate_series(0, 1) AS k;
    GET DIAGNOSTICS n = ROW_COUNT;
    PERFORM pg_sleep({PROPAGATION});  -- propagating orbits takes a while
    INSERT INTO passes_log (event_id, norad_id, job_id, attempt, passes)
    VALUES ((job.payload->>'event_id')::bigint, sat.norad_id, job.id, job.attempt, n);
END
$fn$;

CREATE FUNCTION page_operators(job pgq.claimed_job) RETURNS void
LANGUAGE plpgsql AS $fn$
DECLARE
    norad integer := (job.payload->'payload'->>'norad_id')::integer;
BEGIN
    -- The ground-station API is slow to answer about this one, the first time.
    IF norad = {FLAKY} AND job.attempt = 1 THEN
        RAISE EXCEPTION 'ground station API timeout'
              USING DETAIL = 'POST /alerts for NORAD ' || norad || ' got no answer in 5 s';
    END IF;
    INSERT INTO alerts (event_id, norad_id, job_id, attempt, message)
    SELECT (job.payload->>'event_id')::bigint, norad, job.id, job.attempt,
           s.name || ': new elements, epoch ' || (job.payload->'payload'->>'epoch')
      FROM satellites s WHERE s.norad_id = norad;
END
$fn$;

-- Queues created by {ROLE}: their handlers run as {ROLE}.
SELECT pgq.create_queue('{TLE_QUEUE}', lease => '{TLE_LEASE}');
SELECT pgq.create_queue('{PASSES_QUEUE}', handler => 'recompute_passes(pgq.claimed_job)');
SELECT pgq.create_queue('{ALERTS_QUEUE}', max_attempts => {ALERT_MAX_ATTEMPTS},
                        backoff_base => '{ALERT_BACKOFF}', backoff_max => '1 second',
                        handler => 'page_operators(pgq.claimed_job)');
SELECT pgq.create_topic('{TOPIC}', if_not_exists => true);
SELECT pgq.subscribe('{TOPIC}', '{PASSES_QUEUE}');
SELECT pgq.subscribe('{TOPIC}', '{ALERTS_QUEUE}');
RESET ROLE;
"""


def epoch_of(norad, changes):
    """The TLE epoch of a satellite's elements after `changes` updates."""
    return f"{26121.0 + 0.01 * list(SATELLITES).index(norad) + 0.25 * changes:.8f}"


def download(refresh):
    """The catalogue as refresh number `refresh` sees it: norad -> (epoch,
    mean motion). Deterministic: a satellite changes on the refreshes that
    CHANGES lists, and only there (0 = the elements at the start)."""
    feed = {}
    for norad, (_name, _inc, motion) in SATELLITES.items():
        n = sum(1 for r, sats in CHANGES.items() if r <= refresh and norad in sats)
        feed[norad] = (epoch_of(norad, n), round(motion + n * 0.00037, 5))
    return feed


def name_of(norad):
    return SATELLITES[norad][0]
