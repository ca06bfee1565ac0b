"""Multi-connection tests of the coordination primitives (SPEC section 4).

Runs like test_concurrency.py (same DSN, same fresh-extension setUp, whose
base class and helpers it reuses): threads with a connection each, released
together by a barrier, every call its own transaction; the outcome is
checked through invariants that a lost update or a race would break.
"""

import collections
import random
import threading
import time

from test_concurrency import HANG, PgqTestCase

MEMBERS = ["ann", "bob", "cat", "dan", "eve"]  # ids ascending in this order


class CoordinationTest(PgqTestCase):
    def setUp(self):
        super().setUp()
        ids = [self.scalar("SELECT pgq.add_member('t', %s)", (m,)) for m in MEMBERS]
        self.assertEqual(ids, sorted(ids), "member ids follow the order of add_member")

    def team(self):
        """(turn, name of the member served last) of team t."""
        return self.admin.execute(
            "SELECT t.turn, m.name FROM pgq.teams t"
            "  LEFT JOIN pgq.team_members m ON m.member_id = t.last_member_id"
            " WHERE t.name = 't'"
        ).fetchone()

    def run_together(self, work, threads):
        """Runs work(conn, i) on `threads` connections released by one barrier.

        Returns the results in thread order, and checks that all threads were
        running at the same time at some point (the test was concurrent)."""
        conns = [self.connect() for _ in range(threads)]
        barrier = threading.Barrier(threads)
        spans = [None] * threads

        def run(conn, i):
            barrier.wait(HANG)
            start = time.monotonic()
            result = work(conn, i)
            spans[i] = (start, time.monotonic())
            return result

        tasks = [
            self.spawn(lambda c=c, i=i: run(c, i), f"worker{i}") for i, c in enumerate(conns)
        ]
        results = [t.value(120) for t in tasks]
        latest_start = max(s for s, _ in spans)
        earliest_end = min(e for _, e in spans)
        self.assertLess(latest_start, earliest_end, "the workers never ran at the same time")
        return results

    def test_next_turn_concurrent_callers_get_consecutive_turns(self):
        threads, calls = 8, 1000

        def work(conn, _):
            return [
                conn.execute("SELECT pgq.next_turn('t')").fetchone()[0] for _ in range(calls)
            ]

        results = self.run_together(work, threads)
        served = collections.Counter(name for names in results for name in names)
        # 8,000 consecutive turns of a strict rotation of 5: 1,600 each. Two
        # callers reading the same cursor would serve someone twice.
        self.assertEqual(served, {m: threads * calls // len(MEMBERS) for m in MEMBERS})
        self.assertEqual(self.team(), (threads * calls, MEMBERS[-1]))
        # And the rotation carries on from there.
        self.assertEqual(self.scalar("SELECT pgq.next_turn('t')"), MEMBERS[0])

    def test_assign_concurrent_callers_agree_on_one_owner(self):
        threads = 8
        subjects = [f"chat-{n:03d}" for n in range(200)]

        def work(conn, i):
            order = list(subjects)
            random.Random(i).shuffle(order)  # each connection in its own order
            return {
                s: conn.execute("SELECT pgq.assign('t', %s)", (s,)).fetchone()[0] for s in order
            }

        results = self.run_together(work, threads)
        rows = self.admin.execute(
            "SELECT a.subject, a.owner FROM pgq.assignments a"
            "  JOIN pgq.teams t USING (team_id) WHERE t.name = 't'"
        ).fetchall()
        owners = dict(rows)
        self.assertEqual(len(rows), len(subjects), "one assignment row per subject")
        self.assertEqual(sorted(owners), subjects)
        for i, got in enumerate(results):
            wrong = {s: (o, owners[s]) for s, o in got.items() if o != owners[s]}
            self.assertEqual(wrong, {}, f"worker {i}: subject -> (returned, stored owner)")
        # One turn per new subject, none for the 1,400 calls that found an
        # owner; the turns go round the team, so each member owns 40.
        self.assertEqual(self.team()[0], len(subjects))
        self.assertEqual(
            collections.Counter(owners.values()),
            {m: len(subjects) // len(MEMBERS) for m in MEMBERS},
        )
        # Asking again spends nothing.
        self.assertEqual(self.scalar("SELECT pgq.assign('t', 'chat-000')"), owners["chat-000"])
        self.assertEqual(self.team()[0], len(subjects))

    def test_next_turn_and_assign_share_one_rotation(self):
        # Half the workers take turns, half assign new subjects (each subject
        # twice, by two workers): every turn spent, by either function, is
        # the next one of the same rotation.
        threads, calls, subjects = 8, 500, 200

        def work(conn, i):
            if i % 2 == 0:
                return [
                    conn.execute("SELECT pgq.next_turn('t')").fetchone()[0] for _ in range(calls)
                ]
            mine = [f"s-{n:03d}" for n in range(subjects) if n % 2 == (i // 2) % 2]
            random.Random(i).shuffle(mine)
            return {s: conn.execute("SELECT pgq.assign('t', %s)", (s,)).fetchone()[0] for s in mine}

        results = self.run_together(work, threads)
        owners = dict(self.admin.execute("SELECT subject, owner FROM pgq.assignments").fetchall())
        self.assertEqual(len(owners), subjects)
        for got in results[1::2]:
            self.assertEqual({s: owners[s] for s in got}, got)
        served = collections.Counter(n for names in results[0::2] for n in names)
        served.update(owners.values())
        total = threads // 2 * calls + subjects
        self.assertEqual(self.team()[0], total)
        self.assertEqual(served, {m: total // len(MEMBERS) for m in MEMBERS})
