"""pgq-worker over several queues (--queue given more than once, pgq_cpp 1.2),
and jobs that wait for others (enqueued with after => ...), against a real
server. Run with the others by cli/run_tests.sh (test_worker.py loads this
module); the harness (a queue and $OUT per test, the helpers, the rules: no
fixed sleeps, every wait bounded) is test_worker.WorkerHarness.
"""

from psycopg.types.json import Jsonb

from test_worker import CONSUMER, WorkerHarness, wait_for

# Each command records its job's queue, id and payload, one line per job.
RECORD = 'printf "%s %s %s\\n" "$PGQ_QUEUE" "$PGQ_JOB_ID" "$(cat)" >> "$OUT/ran"'


class QueuesTest(WorkerHarness):
    def second_queue(self, suffix="b"):
        """Another queue for this test, dropped with it."""
        name = f"{self.queue[:62 - len(suffix)]}_{suffix}"  # at most 63 characters
        self.sql("SELECT pgq.create_queue(%s, max_attempts => 5, backoff_base => '0')", name)
        self.addCleanup(self.sql, "SELECT pgq.drop_queue(%s, force => true)", name)
        return name

    def enqueue_to(self, queue, payload, priority=0, after=None):
        return self.sql(
            "SELECT pgq.enqueue(%s, %s, priority => %s, after => %s::bigint[])",
            queue, Jsonb(payload), priority, after,
        )[0][0]

    def ran(self):
        """(queue, id, payload text) per job run, in order."""
        if not self.exists("ran"):
            return []
        return [tuple(line.split(" ", 2)) for line in self.read("ran").splitlines()]

    def test_one_worker_runs_the_jobs_of_two_queues_with_their_own_queue(self):
        other = self.second_queue()
        # By priority across the queues, one claim (--concurrency 1) at a time.
        jobs = [
            (self.queue, self.enqueue_to(self.queue, {"n": 1}, priority=1)),
            (other, self.enqueue_to(other, {"n": 2}, priority=4)),
            (self.queue, self.enqueue_to(self.queue, {"n": 3}, priority=3)),
            (other, self.enqueue_to(other, {"n": 4}, priority=2)),
        ]
        code, log = self.run_worker(
            "--queue", other, "--max-jobs", "4", "--wait", "0", "-v",
            command=["sh", "-c", RECORD],
        )
        self.assertEqual(code, 0, log)
        # PGQ_QUEUE is each job's own queue.
        self.assertEqual(
            [(queue, int(job)) for queue, job, _ in self.ran()],
            [jobs[1], jobs[2], jobs[3], jobs[0]],
        )
        for _, job in jobs:
            self.assertCompleted(job)
        self.assertIn(f"job {jobs[1][1]} (attempt 1): started (queue {other}), pid", log)

    def test_a_claim_over_two_queues_wakes_for_a_job_of_either(self):
        other = self.second_queue()
        proc = self.start(
            "--queue", other, "--max-jobs", "2", "--wait", "60 seconds",
            command=["sh", "-c", RECORD],
        )
        # One claim statement, over both queues, blocked in the server.
        wait_for("a claim blocked in the server", lambda: self.blocked_claims(0.3))
        query = self.sql(
            "SELECT query FROM pg_stat_activity WHERE application_name = 'pgq-worker'"
            "   AND query LIKE '%%pgq.claim_traced(%%' AND datname = current_database()"
        )[0][0]
        self.assertIn("pgq.claim_traced(ARRAY[$1::text, $2::text]", query)
        late = self.enqueue_to(other, {"late": "other"})
        wait_for("the job of the second queue to run", lambda: len(self.ran()) == 1)
        first = self.enqueue_to(self.queue, {"late": "first"})
        code, log = self.finish(proc)
        self.assertEqual(code, 0, log)
        self.assertEqual(
            [(queue, int(job)) for queue, job, _ in self.ran()],
            [(other, late), (self.queue, first)],
        )

    def test_consume_is_needed_on_every_queue(self):
        other = self.second_queue()
        job = self.enqueue_to(self.queue, {"for": "consumer"})
        self.sql("SELECT pgq.grant(%s, %s, 'consume')", CONSUMER, self.queue)
        as_consumer = {"PGOPTIONS": f"-c role={CONSUMER}"}
        code, log = self.run_worker(
            "--queue", other, "--once", "--wait", "0", command=["true"], env=as_consumer
        )
        self.assertEqual(code, 1, log)
        self.assertIn("42501", log)
        self.assertIn(other, log)
        self.assertEqual(self.job(job)[:2], ("p", 0))  # nothing was taken
        self.sql("SELECT pgq.grant(%s, %s, 'consume')", CONSUMER, other)
        code, log = self.run_worker(
            "--queue", other, "--once", "--wait", "0", command=["sh", "-c", RECORD],
            env=as_consumer,
        )
        self.assertEqual(code, 0, log)
        self.assertEqual([(q, int(j)) for q, j, _ in self.ran()], [(self.queue, job)])
        self.assertCompleted(job)

    def test_queue_errors(self):
        # The same queue twice: a usage error, before connecting.
        code, log = self.run_worker("--queue", self.queue, "--once", command=["true"])
        self.assertEqual(code, 2, log)
        self.assertIn(f"--queue {self.queue} is given twice", log)
        # One queue unknown: the server's 42704, and the known one's job is left alone.
        job = self.enqueue({})
        code, log = self.run_worker(
            "--queue", "cli_no_such_queue", "--once", "--wait", "0", command=["true"]
        )
        self.assertEqual(code, 1, log)
        self.assertIn('queue "cli_no_such_queue" does not exist (SQLSTATE 42704)', log)
        self.assertEqual(self.job(job)[:2], ("p", 0))
        # A name that is not a queue name reaches the server as a parameter,
        # quotes and all, and is refused there (22023): nothing was run as SQL.
        code, log = self.run_worker(
            "--queue", "x']); DROP TABLE pgq.jobs; --", "--once", "--wait", "0",
            command=["true"],
        )
        self.assertEqual(code, 1, log)
        self.assertIn("22023", log)
        self.assertEqual(self.job(job)[:2], ("p", 0))

    def test_render_then_send_runs_send_after_render(self):
        # The README's two-step workflow: render, then send after => render,
        # one worker over both queues, two commands at once.
        render, send = self.queue, self.second_queue("send")
        with self.db.transaction():
            render_id = self.enqueue_to(render, {"to": "ann@example.com"})
            send_id = self.enqueue_to(send, {"to": "ann@example.com"}, after=[render_id])
        self.assertEqual((self.info(send_id)["state"], self.info(send_id)["open_parents"]),
                         ("waiting", 1))
        # render holds on until the gate opens, then writes the body; send
        # fails (exit 1) unless the body is there.
        script = (
            'case "$PGQ_QUEUE" in '
            f'{render}) touch "$OUT/rendering"; '
            'while [ ! -e "$OUT/go" ]; do sleep 0.02; done; '
            'echo "Hello" > "$OUT/body"; echo render >> "$OUT/order";; '
            f'{send}) [ -e "$OUT/body" ] || exit 1; echo send >> "$OUT/order";; '
            "*) exit 2;; esac"
        )
        proc = self.start(
            "--queue", send, "--concurrency", "2", "--max-jobs", "2",
            command=["sh", "-c", script],
        )
        wait_for("the render job to run", lambda: self.exists("rendering"))
        # The worker's second slot is claiming: the send job is not ready for it.
        wait_for("a claim blocked in the server", lambda: self.blocked_claims(0.3))
        self.assertEqual(self.info(send_id)["state"], "waiting")
        self.open_gate()
        code, log = self.finish(proc)
        self.assertEqual(code, 0, log)
        self.assertEqual(self.read("order"), "render\nsend\n")
        self.assertCompleted(render_id)
        self.assertCompleted(send_id)
        self.assertNotIn("failed", log)
