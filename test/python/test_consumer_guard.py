"""The single-active guard on a stream consumer (issue 30 R1; docs/streams.md).

pgq-relay --stream took pg_try_advisory_lock(hashtextextended('pgq-relay S
C', 0)) to be the one relay of a (stream, consumer): any role, with no pgq
right at all, could take that key first and keep every relay standing by.
Since 2.0.1 the guard is pgq.acquire_consumer(stream, consumer): it needs the
consume right on the stream, and holds a session lock that no SQL call can
name; pgq.release_consumer gives it up; the end of the holder's session
frees it.
"""
import threading

import psycopg
from psycopg import errors

from test_concurrency import DSN, PgqTestCase

NOBODY, PRODUCER, READER = "pgq_t_guard_nobody", "pgq_t_guard_producer", "pgq_t_guard_reader"
ROLES = [NOBODY, PRODUCER, READER]
OLD_KEY = "SELECT pg_try_advisory_lock(hashtextextended('pgq-relay s c', 0))"


class ConsumerGuardTest(PgqTestCase):
    def setUp(self):
        super().setUp()
        self.drop_roles()
        for role in ROLES:
            self.admin.execute(f"CREATE ROLE {role}")
        self.admin.execute("SELECT pgq.create_stream('s'), pgq.create_stream('other')")
        self.admin.execute("SELECT pgq.register_consumer('s', 'c'), pgq.register_consumer('s', 'd')")
        self.admin.execute("SELECT pgq.register_consumer('other', 'c')")
        self.admin.execute(f"SELECT pgq.grant_stream('{PRODUCER}', 's', 'produce'),"
                           f"       pgq.grant_stream('{READER}', 's', 'consume')")

    def tearDown(self):
        super().tearDown()
        self.drop_roles()

    def drop_roles(self):
        with psycopg.connect(DSN, autocommit=True) as conn:
            for role in ROLES:
                if conn.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (role,)).fetchone():
                    conn.execute(f"DROP OWNED BY {role}")
                    conn.execute(f"DROP ROLE {role}")

    def as_role(self, role):
        conn = self.connect()
        conn.execute(f"SET ROLE {role}")
        return conn

    def acquire(self, conn, stream="s", consumer="c"):
        return self.scalar("SELECT pgq.acquire_consumer(%s, %s)", (stream, consumer), conn)

    def release(self, conn, stream="s", consumer="c"):
        return self.scalar("SELECT pgq.release_consumer(%s, %s)", (stream, consumer), conn)

    def wait_gone(self, pid):
        self.wait_for(f"backend {pid} to end", lambda: self.scalar(
            "SELECT count(*) = 0 FROM pg_stat_activity WHERE pid = %s", (pid,)))

    def test_one_session_holds_the_guard_until_it_releases_it_or_ends(self):
        a, b = self.as_role(READER), self.as_role(READER)
        self.assertTrue(self.acquire(a))
        self.assertTrue(self.acquire(a), "the holder takes it again")
        self.assertFalse(self.acquire(b))
        # Per consumer: another consumer, the same name on another stream.
        self.assertTrue(self.acquire(b, "s", "d"))
        self.assertTrue(self.acquire(self.admin, "other", "c"))
        # One release frees it, however often it was taken.
        self.assertTrue(self.release(a))
        self.assertFalse(self.release(a), "released already")
        self.assertFalse(self.release(a, "s", "d"), "b's, not a's")
        self.assertTrue(self.acquire(b))
        self.assertFalse(self.acquire(a))
        # A transaction that rolls back keeps it: it is the session's.
        b.execute("BEGIN")
        self.assertTrue(self.acquire(b))
        b.execute("ROLLBACK")
        self.assertFalse(self.acquire(a))
        # The holder's session ends (a relay killed): a standby takes it.
        pid = b.info.backend_pid
        b.close()
        self.wait_gone(pid)
        self.assertTrue(self.acquire(a))
        # The same for a backend terminated under a living client.
        c = self.as_role(READER)
        self.assertTrue(self.release(a))
        self.assertTrue(self.acquire(c))
        self.admin.execute("SELECT pg_terminate_backend(%s)", (c.info.backend_pid,))
        self.wait_gone(c.info.backend_pid)
        self.assertTrue(self.acquire(a))

    def test_the_old_advisory_key_blocks_nothing(self):
        # What made 2.0's relay stand by for ever: a role with no pgq right
        # takes the relay's advisory lock key first.
        nobody = self.as_role(NOBODY)
        self.assertTrue(self.scalar(OLD_KEY, conn=nobody))
        self.assertTrue(self.scalar("SELECT pg_try_advisory_lock(0)", conn=nobody))
        reader = self.as_role(READER)
        self.assertTrue(self.acquire(reader))
        # And releasing every advisory lock of its own session (DISCARD ALL
        # in a pool) does not touch another session's guard.
        nobody.execute("SELECT pg_advisory_unlock_all()")
        self.assertFalse(self.acquire(self.as_role(READER)))

    def test_the_guard_takes_the_consume_right(self):
        for role in (NOBODY, PRODUCER):
            conn = self.as_role(role)
            for call in (self.acquire, self.release):
                with self.subTest(role=role, call=call.__name__):
                    with self.assertRaises(errors.InsufficientPrivilege) as raised:
                        call(conn)
                    self.assertIn('stream "s"', str(raised.exception))
            # The right is checked before the consumer is looked up: a role
            # with no right learns nothing of the stream's consumers.
            with self.assertRaises(errors.InsufficientPrivilege):
                self.acquire(conn, "s", "missing")
        # Refused calls held nothing: a reader takes the guard.
        reader = self.as_role(READER)
        self.assertTrue(self.acquire(reader))
        # A reader of 's' has no right on 'other'.
        with self.assertRaises(errors.InsufficientPrivilege):
            self.acquire(reader, "other", "c")
        # Unknown stream or consumer: as next_batch answers them.
        with self.assertRaises(errors.UndefinedObject) as raised:
            self.acquire(reader, "missing", "c")
        self.assertIn("pgq.create_stream", raised.exception.diag.message_hint or "")
        with self.assertRaises(errors.UndefinedObject) as raised:
            self.acquire(reader, "s", "missing")
        self.assertEqual(str(raised.exception).splitlines()[0],
                         'consumer "missing" of stream "s" does not exist')
        with self.assertRaises(errors.UndefinedObject):
            self.release(reader, "s", "missing")
        for args in ((None, "c"), ("s", None)):
            with self.assertRaises(errors.NullValueNotAllowed):
                self.scalar("SELECT pgq.acquire_consumer(%s, %s)", args, reader)
        # A grant revoked: the holder keeps the guard until it releases it or
        # its session ends, but may take it no more.
        self.admin.execute(f"SELECT pgq.revoke_stream('{READER}', 's', 'consume')")
        with self.assertRaises(errors.InsufficientPrivilege):
            self.acquire(reader)
        self.assertFalse(self.acquire(self.admin))

    def test_sessions_racing_for_the_guard_never_both_get_it(self):
        # Each round every session asks at once (a barrier); exactly one gets
        # the guard, and it releases it before the next round.
        sessions, rounds = 4, 150
        conns = [self.as_role(READER) for _ in range(sessions)]
        barrier = threading.Barrier(sessions, timeout=30)
        won = [[False] * rounds for _ in range(sessions)]
        errors_seen = []

        def racer(i):
            try:
                for r in range(rounds):
                    barrier.wait()
                    won[i][r] = self.acquire(conns[i])
                    barrier.wait()  # every session asked before the winner lets go
                    if won[i][r]:
                        self.assertTrue(self.release(conns[i]))
            except Exception as e:  # noqa: BLE001 (reported below)
                errors_seen.append(e)
                barrier.abort()

        threads = [threading.Thread(target=racer, args=(i,)) for i in range(sessions)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        self.assertEqual(errors_seen, [])
        for r in range(rounds):
            winners = [i for i in range(sessions) if won[i][r]]
            self.assertEqual(len(winners), 1, f"round {r}: winners {winners}")
