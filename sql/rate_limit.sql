-- Rate limits (create_queue's rate_limit): at most that many claims per
-- second from the queue across all workers, a token bucket whose burst is
-- one second's worth (at least one token). Time is pgq's clock, moved here
-- in whole seconds with pgq.debug_clock_offset (the real clock adds only
-- milliseconds between two statements: no token at one per two seconds).
CREATE EXTENSION pgq_cpp;
SELECT pgq.create_queue('api', rate_limit => 0.5);
SELECT count(*) AS enqueued FROM (SELECT pgq.enqueue('api', '{}') FROM generate_series(1, 10)) e;

-- A full bucket (one token: a second's worth, at least one): one claim now,
-- then none until a token comes back.
SELECT count(*) AS first_batch FROM pgq.claim('api', 10);
SELECT count(*) AS empty_bucket FROM pgq.claim('api', 10);
-- Two seconds later: one more token; an hour later, still one (never more
-- than the burst).
SET pgq.debug_clock_offset = '2s';
SELECT count(*) AS after_two_seconds FROM pgq.claim('api', 10);
SET pgq.debug_clock_offset = '1h';
SELECT count(*) AS after_an_hour FROM pgq.claim('api', 10);

-- Removing the limit lets a claim take everything ready.
SELECT pgq.alter_queue('api', rate_limit => 0);
SELECT count(*) AS unlimited FROM pgq.claim('api', 10);
RESET pgq.debug_clock_offset;

-- A slow limit (one claim a minute) still gives its one token.
SELECT pgq.create_queue('slow', rate_limit => 0.0166667);
SELECT count(*) FROM (SELECT pgq.enqueue('slow', '{}') FROM generate_series(1, 3)) e;
SELECT count(*) AS one FROM pgq.claim('slow', 3);
SELECT count(*) AS none FROM pgq.claim('slow', 3);

DROP EXTENSION pgq_cpp;
