-- Per-queue rights (docs/security.md): produce, consume, admin, granted per
-- queue (NULL: every queue) with pgq.grant, checked by every function.
CREATE EXTENSION pgq_cpp;
SELECT pgq.create_queue('mail');
SELECT pgq.create_queue('bills');
CREATE ROLE pgq_r_web;
CREATE ROLE pgq_r_worker;
CREATE ROLE pgq_r_ops;

-- grant and revoke say whether they changed anything.
SELECT pgq.grant('pgq_r_web', 'mail', 'produce') AS granted,
       pgq.grant('pgq_r_web', 'mail', 'produce') AS again;
SELECT pgq.grant('pgq_r_worker', 'mail', 'consume');
SELECT pgq.grant('pgq_r_ops', NULL, 'admin');
SELECT role, q.name AS queue, privilege
  FROM pgq.grants g LEFT JOIN pgq.queues q USING (queue_id) ORDER BY 1, 2, 3;

-- has_queue_privilege answers for a role, a list means any of them.
SELECT r, q, pgq.has_queue_privilege(r, q, 'produce') AS produce,
       pgq.has_queue_privilege(r, q, 'consume') AS consume,
       pgq.has_queue_privilege(r, q, 'admin') AS admin,
       pgq.has_queue_privilege(r, q, 'produce, consume') AS either
  FROM unnest(ARRAY['pgq_r_web', 'pgq_r_worker', 'pgq_r_ops']) r,
       unnest(ARRAY['mail', 'bills']) q
 ORDER BY 1, 2;

-- Each role does what it was given and no more (42501 otherwise).
\set VERBOSITY terse
SET ROLE pgq_r_web;
SELECT pgq.enqueue('mail', '{"to": "ann"}') > 0 AS sent;
SELECT * FROM pgq.claim('mail');
SELECT pgq.enqueue('bills', '{}');
RESET ROLE;
SET ROLE pgq_r_worker;
SELECT payload FROM pgq.claim('mail');
SELECT pgq.enqueue('mail', '{}');
SELECT queue FROM pgq.queue_stats;
RESET ROLE;
SET ROLE pgq_r_ops;
SELECT pgq.pause('bills'), pgq.resume('bills');
SELECT * FROM pgq.claim('bills');
RESET ROLE;
\set VERBOSITY default

-- A revoke counts at once; revoking what was not granted changes nothing.
SELECT pgq.revoke('pgq_r_web', 'mail', 'produce') AS revoked,
       pgq.revoke('pgq_r_web', 'mail', 'produce') AS again;
SELECT pgq.has_queue_privilege('pgq_r_web', 'mail', 'produce');

DROP EXTENSION pgq_cpp;
DROP ROLE pgq_r_web;
DROP ROLE pgq_r_worker;
DROP ROLE pgq_r_ops;
