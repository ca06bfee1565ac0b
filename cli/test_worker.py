"""Scenarios of pgq-worker (cli/) against a real server: run by cli/run_tests.sh.

    PGQ_TEST_DSN="host=/tmp/pgq_cli port=55483 user=postgres dbname=cli" \
        PGQ_WORKER_BIN=build/pgq-worker /usr/bin/python3 cli/test_worker.py [-k name]

The DSN must name a database where the tests may drop and create the
extension, as a superuser; roles pgq_cli_consumer and pgq_cli_nobody are
created and dropped. Each test has a queue of its own and a temporary
directory ($OUT for the commands). Nothing waits a fixed time: every wait is
for an observable state (a file, a row, a process), with a deadline.

Standard library and Debian's psycopg 3 only (/usr/bin/python3).
"""

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import unittest
from datetime import timedelta

import psycopg
from psycopg.conninfo import make_conninfo
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb

DSN = os.environ.get("PGQ_TEST_DSN", "")
BIN = os.environ.get("PGQ_WORKER_BIN", "")
CONSUMER, NOBODY = "pgq_cli_consumer", "pgq_cli_nobody"

# Far above what a healthy run needs: hitting it means a hang, not a slow
# machine.
DEADLINE = 20.0
# Commands wait for a file the test creates ("gate"): they run exactly as
# long as the scenario needs.
GATE = 'while [ ! -e "$OUT/go" ]; do sleep 0.02; done'
# W3C trace contexts: a job's, and another trace's for the worker's own
# environment (OpenTelemetry's environment carrier: TRACEPARENT, TRACESTATE).
JOB_TRACEPARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
JOB_TRACESTATE = "congo=t61rcWkgMzE,rojo=00f067aa0ba902b7"
WORKER_TRACE = {
    "TRACEPARENT": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
    "TRACESTATE": "worker=own",
}


def wait_for(what, probe, timeout=DEADLINE, interval=0.02):
    """Calls probe() until it returns something truthy; returns that."""
    end = time.monotonic() + timeout
    while True:
        value = probe()
        if value:
            return value
        if time.monotonic() > end:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(interval)


class WorkerHarness(unittest.TestCase):
    """A queue and a scratch directory per test, and the helpers; the
    scenarios are in WorkerTest below and in test_worker_lifecycle.py."""

    @classmethod
    def setUpClass(cls):
        if not DSN or not BIN:
            raise RuntimeError("PGQ_TEST_DSN and PGQ_WORKER_BIN must be set (cli/run_tests.sh)")
        cls.db = psycopg.connect(DSN, autocommit=True)
        cls.db.execute("DROP EXTENSION IF EXISTS pgq_cpp CASCADE")
        cls.db.execute("CREATE EXTENSION pgq_cpp")
        for role in (CONSUMER, NOBODY):
            cls._drop_role(role)
            cls.db.execute(f"CREATE ROLE {role}")

    @classmethod
    def tearDownClass(cls):
        for role in (CONSUMER, NOBODY):
            cls._drop_role(role)
        cls.db.execute("DROP EXTENSION IF EXISTS pgq_cpp CASCADE")
        cls.db.close()

    @classmethod
    def _drop_role(cls, role):
        if cls.db.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (role,)).fetchone():
            cls.db.execute(f"DROP OWNED BY {role}")
            cls.db.execute(f"DROP ROLE {role}")

    def setUp(self):
        self.queue = "cli_" + self._testMethodName[len("test_"):][:55]
        self.sql(
            "SELECT pgq.create_queue(%s, max_attempts => 5, backoff_base => '0')", self.queue
        )
        self._tmp = tempfile.TemporaryDirectory(prefix="pgq_cli_test.")
        self.out = self._tmp.name
        self.procs = []

    def tearDown(self):
        for proc in self.procs:
            if proc.poll() is None:  # a failed test left it running
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        open(os.path.join(self.out, "go"), "w").close()  # frees any command left
        self._tmp.cleanup()
        self.sql("SELECT pgq.drop_queue(%s, force => true)", self.queue)

    # -- helpers ------------------------------------------------------------

    def sql(self, query, *params):
        return self.db.execute(query, params).fetchall()

    def enqueue(self, payload, priority=0):
        return self.sql(
            "SELECT pgq.enqueue(%s, %s, priority => %s)", self.queue, Jsonb(payload), priority
        )[0][0]

    def job(self, job_id):
        """(state, attempt, last_error, lease_until) of a job in pgq.jobs, or None."""
        rows = self.sql(
            "SELECT state, attempt, last_error, lease_until FROM pgq.jobs WHERE id = %s", job_id
        )
        return rows[0] if rows else None

    def info(self, job_id):
        """pgq.job(id) as a dict, or None (no row)."""
        with self.db.cursor(row_factory=dict_row) as cur:
            return cur.execute("SELECT * FROM pgq.job(%s)", (job_id,)).fetchone()

    def dead(self, job_id):
        rows = self.sql(
            "SELECT attempts, last_error, reason FROM pgq.dead_jobs WHERE id = %s", job_id
        )
        return rows[0] if rows else None

    def assertCompleted(self, job_id):
        # A completed job leaves pgq.jobs and is not dead-lettered.
        self.assertIsNone(self.job(job_id), "job still in pgq.jobs")
        self.assertIsNone(self.dead(job_id), "job was dead-lettered")

    def start(self, *options, command, env=None, queue=None):
        """Starts pgq-worker in a session (process group) of its own. Its
        commands find its stderr (a file) in $WORKER_LOG. Its per-job
        directories are made in $OUT (TMPDIR), so that a worker a failed test
        had to kill leaves none behind."""
        log = os.path.join(self.out, f"worker{len(self.procs)}.err")
        environment = dict(
            os.environ, OUT=self.out, WORKER_LOG=log, TMPDIR=self.out, **(env or {})
        )
        stderr = open(log, "wb")
        proc = subprocess.Popen(
            [BIN, "--dsn", DSN, "--queue", queue or self.queue, *options, "--", *command],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=stderr,
            env=environment, start_new_session=True,
        )
        stderr.close()
        proc.stderr_path = stderr.name
        self.procs.append(proc)
        return proc

    def finish(self, proc, timeout=DEADLINE):
        """Waits for the worker to exit; returns (exit status, its stderr)."""
        try:
            code = proc.wait(timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"pgq-worker still running after {timeout} s:\n{self.log(proc)}")
        return code, self.log(proc)

    def run_worker(self, *options, command, env=None, queue=None):
        return self.finish(self.start(*options, command=command, env=env, queue=queue))

    @staticmethod
    def log(proc):
        with open(proc.stderr_path, encoding="utf-8", errors="replace") as f:
            return f.read()

    def path(self, name):
        return os.path.join(self.out, name)

    def exists(self, name):
        return os.path.exists(self.path(name))

    def read(self, name):
        with open(self.path(name), encoding="utf-8") as f:
            return f.read()

    def blocked_claims(self, seconds):
        """The worker's claims that have been waiting in the server this long."""
        return self.sql(
            "SELECT pid FROM pg_stat_activity WHERE datname = current_database()"
            "   AND application_name = 'pgq-worker' AND state = 'active'"
            "   AND query LIKE '%%pgq.claim_traced(%%'"
            "   AND now() - query_start >= %s * interval '1 second'",
            seconds,
        )

    def open_gate(self):
        open(self.path("go"), "w").close()


class WorkerTest(WorkerHarness):
    # -- scenarios ----------------------------------------------------------

    def test_payload_on_stdin_env_set_exit_0_completes_once_takes_one(self):
        payload = {"text": 'héllo "world" \\ €', "n": [1, 2.5, None], "nested": {"k": True}}
        first = self.enqueue(payload)
        second = self.enqueue({"second": 1})
        # The signal state first, read by the shell itself with builtins:
        # the shell changes its own mask around every child it waits for (so
        # a `grep /proc/$$/status` catches whatever the shell is doing then),
        # and a forked child's mask is the shell's, not the worker's.
        script = (
            "while read -r line; do case $line in SigBlk:*|SigIgn:*) echo \"$line\";; esac;"
            ' done < /proc/self/status > "$OUT/signals.$PGQ_JOB_ID"; '
            'cat > "$OUT/stdin.$PGQ_JOB_ID"; '
            'printf "%s\\n" "$PGQ_JOB_ID" "$PGQ_JOB_ATTEMPT" "$PGQ_QUEUE" "$PGQ_JOB_MAX_ATTEMPTS"'
            ' > "$OUT/env.$PGQ_JOB_ID"'
        )
        code, log = self.run_worker("--once", "--wait", "0", command=["sh", "-c", script])
        self.assertEqual(code, 0, log)
        # The payload is the whole stdin (then a newline), the env says which job.
        self.assertEqual(json.loads(self.read(f"stdin.{first}")), payload)
        self.assertTrue(self.read(f"stdin.{first}").endswith("}\n"))
        self.assertEqual(
            self.read(f"env.{first}").splitlines(), [str(first), "1", self.queue, "5"]
        )
        # The worker ignores SIGPIPE and catches SIGTERM/SIGINT/SIGCHLD; its
        # command starts with nothing blocked and SIGPIPE's default action
        # (so `producer | head -1` ends the producer as in a shell).
        masks = dict(line.split(":") for line in self.read(f"signals.{first}").splitlines())
        self.assertEqual(int(masks["SigBlk"], 16), 0)
        self.assertEqual(int(masks["SigIgn"], 16) & (1 << (signal.SIGPIPE - 1)), 0)
        self.assertCompleted(first)
        # --once: one job, then exit; the other was never claimed.
        self.assertFalse(self.exists(f"stdin.{second}"))
        self.assertEqual(self.job(second)[:2], ("p", 0))

    def enqueue_traced(self, payload, traceparent, tracestate=None, priority=0):
        return self.sql(
            "SELECT pgq.enqueue(%s, %s, priority => %s, traceparent => %s, tracestate => %s)",
            self.queue, Jsonb(payload), priority, traceparent, tracestate,
        )[0][0]

    def command_environment(self, job_id):
        """The environment the command of that job had (it ran `env -0`)."""
        with open(self.path(f"env.{job_id}"), encoding="utf-8") as f:
            return dict(entry.split("=", 1) for entry in f.read().split("\0") if entry)

    @staticmethod
    def trace_of(env):
        return {name: env[name] for name in ("TRACEPARENT", "TRACESTATE") if name in env}

    def test_a_traced_jobs_command_gets_its_traceparent_and_tracestate(self):
        # Under a worker that has a trace of its own in its environment: the
        # job's context replaces it; a job with a traceparent and no
        # tracestate gets no TRACESTATE (the worker's is another trace's).
        both = self.enqueue_traced({"n": 1}, JOB_TRACEPARENT, JOB_TRACESTATE, priority=1)
        parent_only = self.enqueue_traced({"n": 2}, JOB_TRACEPARENT)
        code, log = self.run_worker(
            "--max-jobs", "2", "--wait", "0",
            command=["sh", "-c", 'env -0 > "$OUT/env.$PGQ_JOB_ID"'], env=WORKER_TRACE,
        )
        self.assertEqual(code, 0, log)
        env = self.command_environment(both)
        self.assertEqual(
            self.trace_of(env), {"TRACEPARENT": JOB_TRACEPARENT, "TRACESTATE": JOB_TRACESTATE}
        )
        self.assertEqual(env.get("PGQ_JOB_ID"), str(both))
        env = self.command_environment(parent_only)
        self.assertEqual(self.trace_of(env), {"TRACEPARENT": JOB_TRACEPARENT})
        self.assertCompleted(both)
        self.assertCompleted(parent_only)

    def test_an_untraced_job_does_not_inherit_the_workers_trace(self):
        # A worker started inside a traced script: its own TRACEPARENT and
        # TRACESTATE are not the job's, and reach no command; the rest of
        # its environment does.
        job = self.enqueue({"untraced": True})
        code, log = self.run_worker(
            "--once", "--wait", "0",
            command=["sh", "-c", 'env -0 > "$OUT/env.$PGQ_JOB_ID"'], env=WORKER_TRACE,
        )
        self.assertEqual(code, 0, log)
        env = self.command_environment(job)
        self.assertEqual(self.trace_of(env), {})
        self.assertEqual(env.get("OUT"), self.out)
        self.assertEqual(env.get("PGQ_JOB_ID"), str(job))
        self.assertCompleted(job)

    def test_nonzero_exit_fails_with_stderr_then_dead_letters(self):
        self.sql("SELECT pgq.alter_queue(%s, max_attempts => 2)", self.queue)
        job = self.enqueue({"k": "v"})
        command = ["sh", "-c", 'echo "boom on attempt $PGQ_JOB_ATTEMPT" >&2; exit 3']
        code, log = self.run_worker("--once", "--wait", "0", command=command)
        self.assertEqual(code, 0, log)  # a failed job is not a worker error
        self.assertIn("boom on attempt 1", log)  # the command's stderr is shown too
        state, attempt, last_error, _ = self.job(job)
        self.assertEqual((state, attempt), ("p", 1))
        self.assertEqual(last_error, "exit status 3\nboom on attempt 1")
        # backoff_base 0: due again at once; the second failure exhausts it.
        code, log = self.run_worker("--once", "--wait", "0", command=command)
        self.assertEqual(code, 0, log)
        self.assertIsNone(self.job(job))
        self.assertEqual(self.dead(job), (2, "exit status 3\nboom on attempt 2", "exhausted"))

    def test_exit_status_or_signal_when_stderr_is_empty(self):
        seven = self.enqueue("seven", priority=1)
        killed = self.enqueue("killed")
        script = 'case "$(cat)" in *seven*) exit 7;; *) kill -KILL $$;; esac'
        # Both in one claim (backoff 0 would hand "seven" back to a second one).
        code, log = self.run_worker(
            "--concurrency", "2", "--max-jobs", "2", "--wait", "0", command=["sh", "-c", script]
        )
        self.assertEqual(code, 0, log)
        self.assertEqual(self.job(seven)[1:3], (1, "exit status 7"))
        self.assertEqual(self.job(killed)[1:3], (1, "killed by signal 9"))

    def test_long_stderr_keeps_its_last_4kb_as_valid_text(self):
        job = self.enqueue({})
        script = (
            "printf HEAD-MARKER >&2; head -c 20000 /dev/zero | tr '\\0' x >&2; "
            "printf '\\377\\376\\000 TAIL-MARKER\\n' >&2; exit 1"
        )
        code, log = self.run_worker("--once", "--wait", "0", command=["sh", "-c", script])
        self.assertEqual(code, 0, log)
        last_error = self.job(job)[2]
        self.assertTrue(last_error.startswith("exit status 1\n...xxx"), last_error[:40])
        self.assertTrue(last_error.endswith("\ufffd\ufffd\ufffd TAIL-MARKER"), last_error[-40:])
        self.assertNotIn("HEAD-MARKER", last_error)
        self.assertLessEqual(len(last_error.encode()), 4096 + 64)

    def test_long_command_is_extended_not_redelivered(self):
        # No --lease: the worker renews with the queue's 3 s lease, every
        # 1.5 s, for the running job and for the one prefetched behind it (a
        # lease lapses only if a renewal comes 1.5 s late).
        self.sql("SELECT pgq.alter_queue(%s, lease => '3 seconds')", self.queue)
        jobs = [self.enqueue({"n": n}) for n in range(2)]
        script = 'echo "run $PGQ_JOB_ID" >> "$OUT/runs"; ' + GATE
        proc = self.start(
            "--max-jobs", "2", "--prefetch", "1", "--wait", "0", command=["sh", "-c", script]
        )
        wait_for("the first job to run", lambda: self.exists("runs"))
        leases = [self.job(j)[3] for j in jobs]
        self.assertEqual([self.job(j)[:2] for j in jobs], [("r", 1), ("r", 1)])

        # Past the first leases' end, with maintenance (which expires leases)
        # run at every look: both still held under their first claim.
        def past_first_leases():
            now = self.sql("SELECT pgq.clock()")[0][0]
            self.sql("SELECT * FROM pgq.maintain()")  # so this one ran after `now`
            for j in jobs:
                self.assertEqual(self.job(j)[:2], ("r", 1), f"the lease of job {j} expired")
            return now > max(leases) + timedelta(seconds=0.2)

        wait_for("the clock to pass the first leases", past_first_leases)
        for j, lease in zip(jobs, leases):
            self.assertGreater(self.job(j)[3], lease + timedelta(seconds=1))
        self.open_gate()
        code, log = self.finish(proc)
        self.assertEqual(code, 0, log)
        for j in jobs:
            self.assertCompleted(j)
        # Each command ran once: nothing was delivered a second time.
        self.assertEqual(self.read("runs"), "".join(f"run {j}\n" for j in jobs))

    def test_sigterm_finishes_running_command_and_releases_unstarted_jobs(self):
        running = self.enqueue({"first": True}, priority=10)
        others = [self.enqueue({"n": n}) for n in range(3)]
        script = 'touch "$OUT/started.$PGQ_JOB_ID"; ' + GATE + '; echo finished > "$OUT/done"'
        proc = self.start(
            "--concurrency", "1", "--prefetch", "3", "--lease", "1 minute",
            command=["sh", "-c", script],
        )
        wait_for("the first command to start", lambda: self.exists(f"started.{running}"))
        wait_for(
            "the prefetched jobs to be claimed",
            lambda: all(self.job(j)[:2] == ("r", 1) for j in others),
        )
        # To the worker's whole process group, as a terminal's Ctrl-C or a
        # service manager would: the command is in a group of its own.
        os.killpg(proc.pid, signal.SIGTERM)
        # Given back without counting the attempt, while the command runs on.
        wait_for(
            "the unstarted jobs to be released",
            lambda: all(self.job(j)[:2] == ("p", 0) and self.job(j)[3] is None for j in others),
        )
        self.assertIsNone(proc.poll(), "the worker exited before its command finished")
        self.assertEqual(self.job(running)[:2], ("r", 1))
        self.open_gate()
        code, log = self.finish(proc)
        self.assertEqual(code, 0, log)
        self.assertIn("SIGTERM", log)
        self.assertEqual(self.read("done"), "finished\n")
        self.assertCompleted(running)
        for j in others:
            self.assertFalse(self.exists(f"started.{j}"))
            self.assertEqual(self.job(j)[:2], ("p", 0))

    def test_stop_signal_while_waiting_for_a_job_exits_at_once(self):
        # SIGHUP (a closed terminal) stops like SIGTERM and SIGINT.
        proc = self.start("--wait", "60 seconds", command=["true"])
        wait_for("a claim blocked in the server", lambda: self.blocked_claims(0.0))
        os.kill(proc.pid, signal.SIGHUP)
        # Well before the 60 s wait ends: the claim was cancelled.
        code, log = self.finish(proc, timeout=10)
        self.assertEqual(code, 0, log)
        # And it took nothing with it.
        wait_for("the claim's session to end", lambda: not self.blocked_claims(0.0))
        job = self.enqueue({})
        self.assertEqual(self.job(job)[:2], ("p", 0))

    def test_second_signal_is_passed_on_to_the_command(self):
        job = self.enqueue({})
        # The command says which signal it got, then exits 130.
        program = (
            "import os, pathlib, signal, sys, time\n"
            "out = pathlib.Path(os.environ['OUT'])\n"
            "def got(signo, frame):\n"
            "    (out / 'got').write_text(str(signo))\n"
            "    sys.exit(130)\n"
            "signal.signal(signal.SIGINT, got)\n"
            "(out / 'started').touch()\n"
            "while True:\n"
            "    time.sleep(0.02)\n"
        )
        proc = self.start("--once", command=[sys.executable, "-c", program])
        wait_for("the command to start", lambda: self.exists("started"))
        os.killpg(proc.pid, signal.SIGINT)
        wait_for("the worker to take the first signal", lambda: "SIGINT" in self.log(proc))
        self.assertFalse(self.exists("got"), "the first signal reached the command")
        os.killpg(proc.pid, signal.SIGINT)
        code, log = self.finish(proc)
        self.assertEqual(code, 0, log)
        self.assertEqual(self.read("got"), str(int(signal.SIGINT)))
        self.assertEqual(self.job(job)[:3], ("p", 1, "exit status 130"))

    def test_large_payload_reaches_stdin_whole_or_is_not_read(self):
        # Far more than a pipe holds: written as the command reads.
        payload = {"blob": "ü" * 300_000}
        read = self.enqueue(payload, priority=1)
        ignored = self.enqueue(payload)
        script = '[ "$PGQ_JOB_ID" = %d ] && cat > "$OUT/stdin"; exit 0' % read
        code, log = self.run_worker(
            "--max-jobs", "2", "--wait", "0", command=["sh", "-c", script]
        )
        self.assertEqual(code, 0, log)
        self.assertEqual(json.loads(self.read("stdin")), payload)
        # A command that never reads its stdin is not a failure.
        self.assertCompleted(read)
        self.assertCompleted(ignored)

    def end_worker_sessions(self):
        """Terminates the worker's two sessions and waits until they are gone."""
        terminated = self.sql(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
            " WHERE datname = current_database() AND application_name = 'pgq-worker'"
        )
        self.assertEqual(len(terminated), 2)
        wait_for(
            "the sessions to end",
            lambda: not self.sql(
                "SELECT 1 FROM pg_stat_activity"
                " WHERE datname = current_database() AND application_name = 'pgq-worker'"
            ),
        )

    def test_reconnects_to_report_after_losing_its_connections(self):
        job = self.enqueue({})
        proc = self.start("--once", command=["sh", "-c", 'touch "$OUT/started"; ' + GATE])
        wait_for("the command to start", lambda: self.exists("started"))
        # Both of the worker's sessions end (a server restart, an idle timeout).
        self.end_worker_sessions()
        self.open_gate()
        code, log = self.finish(proc)
        self.assertEqual(code, 0, log)
        self.assertCompleted(job)

    def test_retries_the_outcome_while_the_database_refuses_connections(self):
        # The command succeeds while the worker cannot reconnect (a restart,
        # a database closed for a while): the worker keeps trying to record
        # the outcome instead of leaving the job to run again when its lease
        # (long here: expiry is not what saves it) runs out.
        job = self.enqueue({})
        script = 'echo run >> "$OUT/runs"; touch "$OUT/started"; ' + GATE
        proc = self.start("--once", "--lease", "20 seconds", command=["sh", "-c", script])
        wait_for("the command to start", lambda: self.exists("started"))
        # The current database cannot be closed from a session of its own:
        # from one on the postgres database.
        db = self.sql("SELECT current_database()")[0][0]
        admin = psycopg.connect(make_conninfo(DSN, dbname="postgres"), autocommit=True)
        self.addCleanup(admin.close)
        allow = f'ALTER DATABASE "{db}" WITH ALLOW_CONNECTIONS '
        self.addCleanup(admin.execute, allow + "true")
        admin.execute(allow + "false")
        # Both of its sessions end (--once: the claiming one is idle now).
        self.end_worker_sessions()
        self.open_gate()
        # The worker tries to complete, is refused, and tries again later
        # (it used to give up at once: error, exit 1, the job left to run
        # again once its lease ran out).
        def refused_twice():
            if proc.poll() is not None:
                raise AssertionError(f"pgq-worker exited {proc.returncode}:\n{self.log(proc)}")
            return self.log(proc).count(f"pgq.complete of job {job} (attempt 1) failed;") >= 2

        wait_for("two refused tries of pgq.complete", refused_twice)
        self.assertEqual(self.job(job)[:2], ("r", 1))
        admin.execute(allow + "true")
        code, log = self.finish(proc)
        self.assertEqual(code, 0, log)
        self.assertIn("not currently accepting connections", log)
        self.assertCompleted(job)
        self.assertEqual(self.read("runs"), "run\n")  # ran once

    def test_commands_run_concurrently(self):
        jobs = [self.enqueue({"n": n}) for n in range(3)]
        # Each command waits until all three have started: only three at once
        # can finish (a command gives up after 10 s and fails its job).
        script = (
            'touch "$OUT/started.$PGQ_JOB_ID"; i=0; '
            'while [ "$(ls "$OUT" | grep -c "^started\\.")" -lt 3 ]; do '
            "i=$((i+1)); [ $i -lt 500 ] || exit 1; sleep 0.02; done"
        )
        code, log = self.run_worker(
            "--concurrency", "3", "--max-jobs", "3", command=["sh", "-c", script]
        )
        self.assertEqual(code, 0, log)
        for j in jobs:
            self.assertCompleted(j)

    def test_max_jobs_then_exit_and_idle_exit(self):
        jobs = [self.enqueue({"n": n}) for n in range(5)]
        # Room for 4 (2 running, 2 prefetched), but no more claimed than 3.
        code, log = self.run_worker(
            "--max-jobs", "3", "--concurrency", "2", "--prefetch", "2", "--wait", "0",
            command=["sh", "-c", 'cat > "$OUT/$PGQ_JOB_ID"'],
        )
        self.assertEqual(code, 0, log)
        for j in jobs[:3]:
            self.assertCompleted(j)
        for j in jobs[3:]:
            self.assertEqual(self.job(j)[:2], ("p", 0))
        # Bounded runs also end when a claim finds nothing within --wait.
        self.sql("SELECT pgq.cancel(%s)", jobs[3])
        self.sql("SELECT pgq.cancel(%s)", jobs[4])
        started = time.monotonic()
        code, log = self.run_worker("--once", "--wait", "300 ms", command=["true"])
        self.assertEqual(code, 0, log)
        self.assertGreaterEqual(time.monotonic() - started, 0.3)

    def test_claim_waits_in_the_server_until_a_job_is_committed(self):
        proc = self.start("--once", "--wait", "60 seconds", command=["sh", "-c", "cat > /dev/null"])
        # One claim statement, active (blocked in the server) for half a
        # second already: a polling worker would not look like this.
        wait_for("a claim blocked in the server", lambda: self.blocked_claims(0.5))
        job = self.enqueue({"late": True})
        code, log = self.finish(proc, timeout=10)
        self.assertEqual(code, 0, log)
        self.assertCompleted(job)

    def test_a_cancelled_claim_is_claimed_again(self):
        # pg_cancel_backend on the claiming session (or a statement_timeout,
        # or a lock wait cancelled while ALTER EXTENSION waits): 57014 is a
        # reason to claim again after a short pause, not to exit.
        proc = self.start("--max-jobs", "1", "--wait", "60 seconds", "-v",
                          command=["sh", "-c", "cat > /dev/null"])
        wait_for("a claim blocked in the server", lambda: self.blocked_claims(0.3))
        [(pid,)] = self.blocked_claims(0.3)
        [(cancelled_at,)] = self.sql("SELECT clock_timestamp()")
        self.sql("SELECT pg_cancel_backend(%s)", pid)
        # A new claim, from the same session, blocked in the server again.
        wait_for("the claim again", lambda: self.sql(
            "SELECT 1 FROM pg_stat_activity WHERE pid = %s AND state = 'active'"
            "   AND query LIKE '%%pgq.claim_traced(%%' AND query_start > %s", pid, cancelled_at))
        self.assertIsNone(proc.poll())
        job = self.enqueue({"after": "cancel"})
        code, log = self.finish(proc, timeout=10)
        self.assertEqual(code, 0, log)
        self.assertCompleted(job)
        self.assertIn("pgq.claim was cancelled", log)

    def test_unknown_queue_exits_1_with_42704(self):
        code, log = self.run_worker("--once", command=["true"], queue="cli_no_such_queue")
        self.assertEqual(code, 1, log)
        self.assertIn("42704", log)
        self.assertIn('queue "cli_no_such_queue" does not exist', log)

    def test_consume_grant_is_enough_and_needed(self):
        job = self.enqueue({"for": "consumer"})
        self.sql("SELECT pgq.grant(%s, %s, 'consume')", CONSUMER, self.queue)
        # No grant: refused, and the job is untouched.
        code, log = self.run_worker(
            "--once", "--wait", "0", command=["true"], env={"PGOPTIONS": f"-c role={NOBODY}"}
        )
        self.assertEqual(code, 1, log)
        self.assertIn("42501", log)
        self.assertEqual(self.job(job)[:2], ("p", 0))
        # consume on this queue: claims, runs, completes, and extends: the
        # command runs until the worker has logged an extension (at half its
        # 2 s lease), or gives up after 10 s and fails.
        script = (
            'touch "$OUT/ran"; i=0; until grep -q "lease extended" "$WORKER_LOG"; do '
            "i=$((i+1)); [ $i -lt 500 ] || exit 1; sleep 0.02; done"
        )
        code, log = self.run_worker(
            "--once", "--wait", "0", "--lease", "2 seconds", "-v",
            command=["sh", "-c", script],
            env={"PGOPTIONS": f"-c role={CONSUMER}"},
        )
        self.assertEqual(code, 0, log)
        self.assertTrue(self.exists("ran"))
        self.assertIn("lease extended", log)
        self.assertCompleted(job)

    def test_usage_and_connection_errors(self):
        usage = [
            ["--once", "--max-jobs", "2"],
            ["--concurrency", "0"],
            ["--bogus"],
            ["--lease", "not an interval"],
            ["--wait", "0"],  # a worker that would poll
            ["--unknown-exit-code", "0"],
            ["--snooze-exit-code", "256"],
            ["--unknown-exit-code", "3", "--snooze-exit-code", "3"],
            ["--snooze-delay", "not an interval"],
            ["--snooze-delay", "-1 second"],
            ["--kill-grace", "soon"],
            ["--kill-grace", "-1 second"],
        ]
        for options in usage:
            code, log = self.run_worker(*options, command=["true"])
            self.assertEqual(code, 2, f"{options}: {log}")
            self.assertIn("Try 'pgq-worker --help'", log)
        code, log = self.run_worker("--once", command=["/nonexistent/command"])
        self.assertEqual((code, "cannot run /nonexistent/command" in log), (2, True), log)
        no_command = subprocess.run([BIN, "--queue", self.queue], capture_output=True)
        self.assertEqual(no_command.returncode, 2)
        refused = subprocess.run(
            [BIN, "--dsn", "host=/nonexistent-socket-dir", "--queue", self.queue, "--", "true"],
            capture_output=True,
        )
        self.assertEqual(refused.returncode, 1, refused.stderr)
        self.assertIn(b"nonexistent-socket-dir", refused.stderr)


def load_tests(loader, tests, pattern):
    """The 1.2 scenarios (result, progress, snooze, outcome unknown,
    cancellation; several queues and jobs that wait for others) live in
    files of their own; they run with these."""
    import test_worker_lifecycle
    import test_worker_queues

    tests.addTests(loader.loadTestsFromModule(test_worker_lifecycle))
    tests.addTests(loader.loadTestsFromModule(test_worker_queues))
    return tests


def main():
    runner = unittest.TextTestRunner(verbosity=2)
    program = unittest.main(module=__name__, testRunner=runner, exit=False)
    result = program.result
    failed = len(result.failures) + len(result.errors) + len(result.skipped)
    failed += len(result.unexpectedSuccesses)
    passed = result.testsRun - failed
    print(f"{passed} passed, {failed} failed")
    sys.exit(0 if failed == 0 and passed > 0 else 1)


if __name__ == "__main__":
    main()
