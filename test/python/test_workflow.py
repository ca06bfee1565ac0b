"""A workflow of dependent jobs (issue 18, enqueue's after) run by
concurrent workers: every child either ran after all its parents or died
with reason dependency_failed, none ran early, none was lost.

Runs like test_concurrency.py (same DSN, same fresh-extension setUp, whose
base class and helpers it reuses). Workers are threads with their own
autocommit connections, claiming across the workflow's three queues with
one multi-queue claim; a maintenance loop calls pgq.maintain() meanwhile
(dependents beyond a transaction's inline cascade are maintenance's).

The expectations are computed from the DAG the test built, never read back
from the server: a job dies iff it is marked to fail or one of its parents
dies; it dies with reason dependency_failed (never claimed) iff one of its
parents died, else 'exhausted' (claimed once, failed) iff it is marked.

"None ran early" is checked twice, both ways sound (no false alarm):
  - on the server: right after a claim, the worker that holds the child
    reads pgq.jobs for its parents; one still there (live, not done) was
    live when the child was claimed, so the child ran early;
  - on the client: a child's claim returned after each parent's complete
    was called. (Its claim may return before the parent's worker has read
    complete's answer: the parent commits, the server answers both, and
    the thread scheduler picks who runs first, so "claim returned after
    complete returned" is a statistic, printed, not an assertion.)

The DAG is random; its seed is printed and may be set with PGQ_WF_SEED.
"""

import collections
import os
import random
import threading
import time

from psycopg.types.json import Jsonb

from test_concurrency import HANG, PgqTestCase

QUEUES = ["wf_a", "wf_b", "wf_c"]


class Job:
    __slots__ = ("key", "level", "queue", "parents", "after", "fail", "id")

    def __init__(self, key, level, parents, fail, after=None):
        self.key = key  # index in the DAG (enqueue order)
        self.level = level
        self.queue = QUEUES[level - 1]
        self.parents = parents  # keys of the parents, distinct
        self.after = after if after is not None else list(parents)  # as passed
        self.fail = fail
        self.id = None  # the job id, once enqueued


def build_dag(rng):
    """A 3-level DAG of 1,000 jobs: 400 in wf_a, 400 in wf_b after 1-3
    of wf_a, 200 in wf_c after 2-5 of wf_b (a third also after 1-2 of
    wf_a), with wide fan-ins and a repeated parent. 10 % of wf_a and wf_b
    fail. Returns the jobs in enqueue order (parents first)."""
    jobs = []

    def add(level, parents, fail=False, after=None):
        job = Job(len(jobs), level, parents, fail, after)
        jobs.append(job)
        return job

    level1 = [add(1, []) for _ in range(400)]
    for job in rng.sample(level1, 40):
        job.fail = True
    level2 = [add(2, [p.key for p in rng.sample(level1, rng.randint(1, 3))]) for _ in range(400)]
    for job in rng.sample(level2, 40):
        job.fail = True

    died = dead_set(jobs)
    clean2 = [j for j in level2 if j.key not in died]
    # Wide fan-ins: one after 100 random wf_b jobs (almost surely one of
    # them dies), one after 100 that all complete, one after all 400.
    add(3, [p.key for p in rng.sample(level2, 100)])
    add(3, [p.key for p in rng.sample(clean2, min(100, len(clean2)))])
    add(3, [p.key for p in level2])
    # A parent named twice counts once.
    twice = [p.key for p in rng.sample(clean2, 3)]
    add(3, twice, after=twice + [twice[0], twice[2]])
    while len(jobs) < 1000:
        parents = [p.key for p in rng.sample(level2, rng.randint(2, 5))]
        if rng.random() < 1 / 3:
            parents += [p.key for p in rng.sample(level1, rng.randint(1, 2))]
        add(3, parents)
    return jobs


def dead_set(jobs):
    """Keys of the jobs that die: marked to fail, or a parent dies."""
    died = set()
    for job in jobs:  # parents come first
        if job.fail or any(p in died for p in job.parents):
            died.add(job.key)
    return died


class WorkflowTest(PgqTestCase):
    WORKERS = 8
    TIMEOUT = 60.0  # the whole workflow, once enqueued
    MAINTAIN_EVERY = 0.5

    def test_three_level_workflow_with_failing_parents(self):
        """1,000 jobs in three levels, 10 % of the first two failing, run
        by 8 workers claiming across the three queues: every job ended
        exactly once (completed, or dead-lettered), a completed job ran
        after every parent completed, a job died with reason
        dependency_failed iff an ancestor died (and was never claimed),
        and no dependency row is left."""
        seed = int(os.environ.get("PGQ_WF_SEED") or random.randrange(1 << 30))
        print(f"\n  PGQ_WF_SEED={seed}", end="")
        rng = random.Random(seed)
        dag = build_dag(rng)
        by_id = {}
        died = dead_set(dag)
        dep_failed = {j.key for j in dag if any(p in died for p in j.parents)}
        exhausted = died - dep_failed
        completes = set(range(len(dag))) - died

        for q in QUEUES:
            self.admin.execute("SELECT pgq.create_queue(%s, max_attempts => 1)", (q,))
        queue_ids = [
            self.scalar("SELECT queue_id FROM pgq.queues WHERE name = %s", (q,)) for q in QUEUES
        ]

        # Enqueue, parents first, in a few transactions: wf_a in one, wf_b
        # in two, wf_c in one.
        started = time.monotonic()
        batches = [dag[0:400], dag[400:600], dag[600:800], dag[800:]]
        for batch in batches:
            with self.admin.transaction():
                for job in batch:
                    payload = Jsonb({"key": job.key, "level": job.level, "fail": job.fail})
                    if job.parents:
                        after = [dag[p].id for p in job.after]
                        job.id = self.scalar(
                            "SELECT pgq.enqueue(%s, %s, after => %s::bigint[])",
                            (job.queue, payload, after),
                        )
                    else:
                        job.id = self.scalar("SELECT pgq.enqueue(%s, %s)", (job.queue, payload))
                    by_id[job.id] = job
        enqueue_seconds = time.monotonic() - started
        self.assertEqual(len(by_id), len(dag), "an enqueue returned an id twice")

        # Before any worker: every child waits for its distinct parents.
        waiting = dict(
            self.admin.execute(
                "SELECT id, open_parents FROM pgq.jobs WHERE state = 'b' AND queue_id = ANY (%s)",
                (queue_ids,),
            ).fetchall()
        )
        self.assertEqual(
            waiting, {j.id: len(j.parents) for j in dag if j.parents}, "waiting jobs and their open_parents"
        )
        self.assertEqual(
            self.scalar("SELECT count(*) FROM pgq.job_dependencies"),
            sum(len(j.parents) for j in dag),
            "one dependency row per distinct (parent, child)",
        )
        self.assertEqual(
            self.scalar(
                "SELECT sum(awaiting_parents) FROM pgq.queue_stats WHERE queue = ANY (%s)", (QUEUES,)
            ),
            len(waiting),
        )

        # What the workers saw, per job id (under `lock`).
        lock = threading.Lock()
        claims = collections.defaultdict(list)  # id -> [(claimed_at, attempt, queue, worker)]
        finishes = collections.defaultdict(list)  # id -> [(verb, answer, called_at, returned_at)]
        early = []  # (child id, parent ids still live right after its claim)

        maintainer_conn = self.connect()

        def maintain():
            passes = 0
            while not self.stop.is_set():
                maintainer_conn.execute("SELECT * FROM pgq.maintain()").fetchall()
                passes += 1
                self.stop.wait(self.MAINTAIN_EVERY)
            return passes

        conns = [self.connect() for _ in range(self.WORKERS)]
        barrier = threading.Barrier(self.WORKERS + 1)

        def work(conn, w):
            wrng = random.Random(seed * 31 + w)
            barrier.wait(HANG)
            while not self.stop.is_set():
                rows = conn.execute(
                    "SELECT id, queue, attempt, payload FROM pgq.claim(%s::text[], 1, wait => '200 ms')",
                    (QUEUES,),
                ).fetchall()
                claimed_at = time.monotonic()
                if not rows:
                    continue
                assert len(rows) == 1, f"claim(n => 1) returned {rows}"
                job_id, queue, attempt, payload = rows[0]
                with lock:
                    claims[job_id].append((claimed_at, attempt, queue, w))
                job = by_id.get(job_id)
                if job is None:
                    raise AssertionError(f"claimed job {job_id} that the test never enqueued")
                if job.parents:
                    live = conn.execute(
                        "SELECT array_agg(id ORDER BY id) FROM pgq.jobs WHERE id = ANY (%s::bigint[])",
                        ([dag[p].id for p in job.parents],),
                    ).fetchone()[0]
                    if live:
                        with lock:
                            early.append((job_id, live))
                time.sleep(wrng.uniform(0, 0.005))
                called_at = time.monotonic()
                if payload["fail"]:
                    answer = conn.execute(
                        "SELECT pgq.fail(%s, %s, 'boom')", (job_id, attempt)
                    ).fetchone()[0]
                    verb = "fail"
                else:
                    answer = conn.execute(
                        "SELECT pgq.complete(%s, %s)", (job_id, attempt)
                    ).fetchone()[0]
                    verb = "complete"
                returned_at = time.monotonic()
                with lock:
                    finishes[job_id].append((verb, answer, called_at, returned_at))

        maintainer = self.spawn(maintain, "maintain")
        workers = [self.spawn(lambda c=c, w=w: work(c, w), f"worker{w}") for w, c in enumerate(conns)]
        barrier.wait(HANG)
        started = time.monotonic()
        deadline = started + self.TIMEOUT
        left = None
        try:
            while time.monotonic() < deadline:
                left = self.admin.execute(
                    "SELECT (SELECT count(*) FROM pgq.jobs WHERE queue_id = ANY (%s)),"
                    "       (SELECT count(*) FROM pgq.dependency_failures)",
                    (queue_ids,),
                ).fetchone()
                if left == (0, 0):
                    break
                if any(not t.is_alive() for t in workers):
                    break  # a worker failed: reported below
                time.sleep(0.05)
            run_seconds = time.monotonic() - started
        finally:
            self.stop.set()
        for t in workers:
            t.value()  # re-raises a worker's exception
        passes = maintainer.value()

        if left != (0, 0):
            rows = self.admin.execute(
                "SELECT j.id, q.name, j.state, j.open_parents,"
                "       (SELECT array_agg(parent_id ORDER BY parent_id) FROM pgq.job_dependencies d"
                "         WHERE d.child_id = j.id)"
                "  FROM pgq.jobs j JOIN pgq.queues q USING (queue_id)"
                " WHERE j.queue_id = ANY (%s) ORDER BY j.id LIMIT 20",
                (queue_ids,),
            ).fetchall()
            failures = self.admin.execute("SELECT * FROM pgq.dependency_failures LIMIT 20").fetchall()
            self.fail(
                f"after {self.TIMEOUT:.0f} s, (jobs, dependency_failures) left: {left};"
                f" first jobs (id, queue, state, open_parents, parents): {rows};"
                f" failures: {failures}"
            )

        dead = {
            row[0]: row[1:]
            for row in self.admin.execute(
                "SELECT id, queue, reason, attempts, last_error FROM pgq.dead_jobs WHERE queue = ANY (%s)",
                (QUEUES,),
            )
        }
        unknown = set(dead) - set(by_id)
        self.assertEqual(unknown, set(), "dead jobs the test never enqueued")
        dead_keys = {by_id[i].key: row for i, row in dead.items()}

        completed = set()  # keys of the jobs a worker completed
        for job in dag:
            seen = claims.get(job.id, [])
            done = finishes.get(job.id, [])
            if job.key in dep_failed:
                # (c) a job with a dead ancestor was never claimed.
                self.assertEqual(seen, [], f"job {job.id} (a parent dies) was claimed")
                continue
            # (a) every other job was claimed exactly once, by attempt 1,
            # from its own queue, and finished once.
            self.assertEqual(len(seen), 1, f"job {job.id} claims: {seen}")
            self.assertEqual(seen[0][1:3], (1, job.queue), f"job {job.id} claim")
            self.assertEqual(len(done), 1, f"job {job.id} finishes: {done}")
            verb, answer = done[0][:2]
            if job.fail:
                self.assertEqual((verb, answer), ("fail", "dead"), f"job {job.id}")
            else:
                self.assertEqual((verb, answer), ("complete", True), f"job {job.id}")
                completed.add(job.key)

        # (a) completed by a worker or dead, never both.
        self.assertEqual(completed, completes, "the jobs completed")
        self.assertEqual(completed & set(dead_keys), set(), "completed and dead")

        # (b) none ran early: every parent of a completed job completed,
        # and was still live on no claim of its child.
        self.assertEqual(early, [], "children claimed while a parent was still live (child, live parents)")
        overlaps = 0  # claim returned between a parent's complete call and its answer
        edges = 0
        for key in completed:
            job = dag[key]
            claimed_at = claims[job.id][0][0]
            for p in job.parents:
                self.assertIn(p, completed, f"job {job.id} completed, its parent {dag[p].id} not")
                _, _, called_at, returned_at = finishes[dag[p].id][0]
                self.assertGreater(
                    claimed_at,
                    called_at,
                    f"job {job.id} was claimed before its parent {dag[p].id}'s complete was called",
                )
                edges += 1
                overlaps += claimed_at < returned_at

        # (c) dead with the reason the DAG predicts; dependency_failed names
        # a parent of the job that died; exhausted ones failed with 'boom'.
        self.assertEqual(
            {k for k, row in dead_keys.items() if row[1] == "dependency_failed"},
            dep_failed,
            "jobs dead with reason dependency_failed",
        )
        self.assertEqual(
            {k for k, row in dead_keys.items() if row[1] == "exhausted"}, exhausted, "jobs dead exhausted"
        )
        self.assertEqual(set(dead_keys), died, "dead jobs")
        for key, (queue, reason, attempts, last_error) in dead_keys.items():
            job = dag[key]
            self.assertEqual(queue, job.queue)
            if reason == "exhausted":
                self.assertEqual((attempts, last_error), (1, "boom"), f"job {job.id}")
                continue
            self.assertEqual(attempts, 0, f"job {job.id} died of a parent")
            named = last_error.removeprefix("parent job ").removesuffix(" did not complete")
            self.assertTrue(named.isdigit(), f"job {job.id}: last_error {last_error!r}")
            parent = by_id.get(int(named))
            self.assertTrue(
                parent is not None and parent.key in job.parents and parent.key in died,
                f"job {job.id}: last_error {last_error!r} names no dead parent of it",
            )

        # (d) nothing left to settle.
        self.assertEqual(self.scalar("SELECT count(*) FROM pgq.job_dependencies"), 0)
        self.assertEqual(self.scalar("SELECT count(*) FROM pgq.dependency_failures"), 0)
        # (e) none lost.
        self.assertEqual(len(completed) + len(dead_keys), len(dag), "completed + dead")
        self.assertEqual(self.job_count("queue_id = ANY (%s)", (queue_ids,)), 0)
        self.assertEqual(
            self.scalar(
                "SELECT sum(awaiting_parents) FROM pgq.queue_stats WHERE queue = ANY (%s)", (QUEUES,)
            ),
            0,
        )
        # The wide fan-in whose 100 parents all complete did run, last of them.
        self.assertIn(dag[801].key, completed)

        print(
            f"\n  {len(dag)} jobs enqueued in {enqueue_seconds:.1f} s, run in {run_seconds:.1f} s"
            f" by {self.WORKERS} workers ({passes} maintain passes): {len(completed)} completed,"
            f" {len(exhausted)} exhausted, {len(dep_failed)} dependency_failed;"
            f" {edges} parent->child edges of completed jobs, {overlaps} claims returned"
            f" while the parent's complete was still answering"
        )
