-- Coordination primitives (SPEC section 4): turns, assignment, switches,
-- ladders and once. Concurrency is covered by the isolation specs
-- (next_turn_consecutive, assign_one_owner, once_rollback) and
-- test/python/test_coordination.py; this file is the single-session contract.
CREATE EXTENSION pgq_cpp;

CREATE FUNCTION pg_temp.error_of(sql text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
  EXECUTE sql;
  RETURN 'no error';
EXCEPTION WHEN OTHERS THEN
  RETURN SQLSTATE || ': ' || SQLERRM;
END
$$;

-- Members get stable ids in the order they join; adding again is a no-op.
SELECT pgq.add_member('sellers', 'ana') AS ana \gset
SELECT pgq.add_member('sellers', 'bruno') AS bruno \gset
SELECT pgq.add_member('sellers', 'carla') AS carla \gset
SELECT :bruno > :ana AND :carla > :bruno AS ids_ascend,
       pgq.add_member('sellers', 'bruno') = :bruno AS re_add_keeps_id;

-- Strict round robin by id.
SELECT pgq.next_turn('sellers') FROM generate_series(1, 7);
SELECT turn, last_member_id = :ana AS cursor_on_ana FROM pgq.teams WHERE name = 'sellers';

-- Deactivated (explicit value, the stored value returned): skipped, and the
-- others keep their order. Reactivated: back in its place.
SELECT pgq.set_member_active('sellers', 'bruno', false);
SELECT pgq.set_member_active('sellers', 'bruno', false) AS still_false;
SELECT pgq.next_turn('sellers') FROM generate_series(1, 4);
SELECT pgq.set_member_active('sellers', 'bruno', true);
SELECT pgq.next_turn('sellers') FROM generate_series(1, 3);

-- A newcomer joins at the end of the order (highest id): served in this
-- round, since the cursor is below it.
SELECT pgq.add_member('sellers', 'diego') > :carla AS diego_last;
SELECT pgq.next_turn('sellers') FROM generate_series(1, 4);

-- Renaming a member changes nothing in the order (it is by id).
UPDATE pgq.team_members SET name = 'ana maria' WHERE member_id = :ana;
SELECT pgq.next_turn('sellers') FROM generate_series(1, 4);

-- Removed: gone from the rotation; removing again says it was not there.
SELECT pgq.remove_member('sellers', 'carla') AS removed,
       pgq.remove_member('sellers', 'carla') AS removed_again;
SELECT pgq.next_turn('sellers') FROM generate_series(1, 3);

-- Nobody active: a clear error, and no turn is spent.
SELECT turn AS turn_before FROM pgq.teams WHERE name = 'sellers' \gset
SELECT pgq.set_member_active('sellers', m, false) FROM unnest(ARRAY['ana maria', 'bruno', 'diego']) m;
SELECT pgq.next_turn('sellers');
SELECT pg_temp.error_of($$SELECT pgq.next_turn('sellers')$$) AS next_turn_error,
       pg_temp.error_of($$SELECT pgq.assign('sellers', 'conversation-1')$$) AS assign_error;
SELECT turn = :turn_before AS no_turn_spent FROM pgq.teams WHERE name = 'sellers';
SELECT pgq.set_member_active('sellers', m, true) FROM unnest(ARRAY['ana maria', 'bruno', 'diego']) m;

-- assign: the first call spends a turn, later calls return the same owner
-- without spending one, even after the owner is deactivated.
SELECT pgq.assign('sellers', 'conversation-1') AS owner \gset
SELECT turn AS turn_after_first FROM pgq.teams WHERE name = 'sellers' \gset
SELECT pgq.assign('sellers', 'conversation-1') = :'owner' AS same_owner,
       pgq.assign('sellers', 'conversation-1') = :'owner' AS same_again;
SELECT pgq.set_member_active('sellers', :'owner', false);
SELECT pgq.assign('sellers', 'conversation-1') = :'owner' AS owner_kept;
SELECT turn = :turn_after_first AS no_extra_turn FROM pgq.teams WHERE name = 'sellers';
SELECT subject, owner, turn = :turn_after_first AS on_that_turn FROM pgq.assignments;
SELECT pgq.set_member_active('sellers', :'owner', true);
-- New subjects take the following turns.
SELECT s, pgq.assign('sellers', s) FROM (VALUES ('conversation-2'), ('conversation-3')) v(s);

-- A rolled-back assign leaves no owner and no spent turn.
SELECT turn AS turn_before FROM pgq.teams WHERE name = 'sellers' \gset
BEGIN;
SELECT pgq.assign('sellers', 'conversation-9') IS NOT NULL AS assigned_in_tx;
ROLLBACK;
SELECT count(*) AS owners FROM pgq.assignments WHERE subject = 'conversation-9';
SELECT turn = :turn_before AS turn_rolled_back FROM pgq.teams WHERE name = 'sellers';

-- Teams are separate rotations.
SELECT pgq.add_member('support', 'eva') > 0 AS eva_added;
SELECT pgq.next_turn('support'), pgq.next_turn('support');

-- Switches: explicit values, the stored value returned, unset reads NULL.
SELECT pgq.switch('agent:whatsapp') AS unset;
SELECT pgq.set_switch('agent:whatsapp', true) AS on_, pgq.set_switch('agent:whatsapp', true) AS on_again;
SELECT pgq.set_switch('agent:whatsapp', false) AS off, pgq.switch('agent:whatsapp') AS read_back;

-- Ladders climb only: a late lower step returns the stored one.
SELECT pgq.advance('msg-1', 1) AS sent, pgq.advance('msg-1', 3) AS read,
       pgq.advance('msg-1', 2) AS late_delivered, pgq.advance('msg-1', 3) AS read_again;
SELECT pgq.advance('msg-2', 0) AS zero_is_a_step;
SELECT subject, step FROM pgq.ladders ORDER BY subject;

-- once: true for the first committed caller only; a rolled-back one leaves
-- the key free.
BEGIN;
SELECT pgq.once('invite:42') AS first_in_rolled_back_tx;
ROLLBACK;
SELECT pgq.once('invite:42') AS first, pgq.once('invite:42') AS second;
SELECT pgq.once('invite:43') AS other_key;

-- Bad input: SQLSTATE and message, nothing written.
SELECT s AS statement, pg_temp.error_of(s) AS error FROM (VALUES
  ($$SELECT pgq.add_member(NULL, 'x')$$),
  ($$SELECT pgq.add_member('t', NULL)$$),
  ($$SELECT pgq.add_member('', 'x')$$),
  ($$SELECT pgq.add_member('t', '')$$),
  ($$SELECT pgq.add_member(repeat('t', 513), 'x')$$),
  ($$SELECT pgq.set_member_active('nobody', 'x', true)$$),
  ($$SELECT pgq.set_member_active('sellers', 'nobody', true)$$),
  ($$SELECT pgq.set_member_active('sellers', 'bruno', NULL)$$),
  ($$SELECT pgq.remove_member('nobody', 'x')$$),
  ($$SELECT pgq.next_turn(NULL)$$),
  ($$SELECT pgq.next_turn('')$$),
  ($$SELECT pgq.next_turn('nobody')$$),
  ($$SELECT pgq.assign('nobody', 's')$$),
  ($$SELECT pgq.assign('sellers', NULL)$$),
  ($$SELECT pgq.assign('sellers', '')$$),
  ($$SELECT pgq.set_switch(NULL, true)$$),
  ($$SELECT pgq.set_switch('s', NULL)$$),
  ($$SELECT pgq.switch('')$$),
  ($$SELECT pgq.advance('msg-1', -1)$$),
  ($$SELECT pgq.advance('msg-1', NULL)$$),
  ($$SELECT pgq.advance(NULL, 1)$$),
  ($$SELECT pgq.once(NULL)$$),
  ($$SELECT pgq.once('')$$),
  ($$SELECT pgq.once(repeat('k', 513))$$)
) AS t(s);
SELECT count(*) AS teams FROM pgq.teams;
SELECT pgq.advance('msg-1', 0) AS msg1_unchanged;

DROP EXTENSION pgq_cpp;
