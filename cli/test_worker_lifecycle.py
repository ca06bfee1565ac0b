"""pgq-worker's 1.2 scenarios against a real server: the result, progress and
snooze files, --snooze-exit-code, --unknown-exit-code, and the cancellation of
a running job. Run with the others by cli/run_tests.sh (test_worker.py loads
this module); the harness (a queue and $OUT per test, the helpers, the rules:
no fixed sleeps, every wait bounded) is test_worker.WorkerHarness.
"""

import os
import signal
import sys
import time
from datetime import timedelta

from test_worker import GATE, WorkerHarness, wait_for


class LifecycleTest(WorkerHarness):
    def test_result_file_is_the_result_and_bad_json_still_completes(self):
        self.sql("SELECT pgq.alter_queue(%s, keep_completed => '1 hour')", self.queue)
        good = self.enqueue({"kind": "good"}, priority=3)
        bad = self.enqueue({"kind": "bad"}, priority=2)
        none = self.enqueue({"kind": "none"}, priority=1)
        failed = self.enqueue({"kind": "good, then exit 1"})
        script = (
            'payload=$(cat); dir=$(dirname "$PGQ_RESULT_FILE"); '
            'printf "%s" "$dir" > "$OUT/dir.$PGQ_JOB_ID"; '
            'stat -c %a "$dir" > "$OUT/mode.$PGQ_JOB_ID"; '
            'case "$payload" in '
            '*"exit 1"*) echo \'{"x": 1}\' > "$PGQ_RESULT_FILE"; exit 1;; '
            '*good*) printf \'\\n{"message_id": "msg-1", "n": [1, 2.5]}\\n\''
            ' > "$PGQ_RESULT_FILE";; '
            '*bad*) printf \'{"message_id": \' > "$PGQ_RESULT_FILE";; '
            "esac"
        )
        code, log = self.run_worker("--max-jobs", "4", "--wait", "0", command=["sh", "-c", script])
        self.assertEqual(code, 0, log)
        # Kept with the done job (keep_completed), as pgq.job shows it.
        self.assertEqual(self.info(good)["state"], "done", log)
        self.assertEqual(self.info(good)["result"], {"message_id": "msg-1", "n": [1, 2.5]})
        # Not JSON: completed all the same, without a result, and said so once.
        self.assertEqual((self.info(bad)["state"], self.info(bad)["result"]), ("done", None))
        self.assertEqual(log.count("warning: "), 1, log)
        self.assertIn(f"job {bad} (attempt 1): its result file was not accepted as jsonb", log)
        self.assertIn("completed without a result", log)
        # No file: no result, no warning.
        self.assertEqual((self.info(none)["state"], self.info(none)["result"]), ("done", None))
        # A failed command's result file is not read.
        self.assertEqual(self.job(failed)[:3], ("p", 1, "exit status 1"))
        # One private directory per job (mode 0700) in $TMPDIR, gone after the job.
        dirs = [self.read(f"dir.{j}") for j in (good, bad, none, failed)]
        self.assertEqual(len(set(dirs)), 4, dirs)
        for j, d in zip((good, bad, none, failed), dirs):
            self.assertEqual(os.path.dirname(d), self.out)
            self.assertTrue(os.path.basename(d).startswith("pgq-worker."), d)
            self.assertEqual(self.read(f"mode.{j}").strip(), "700")
            self.assertFalse(os.path.exists(d), f"{d} was not removed")

    def test_progress_file_is_sent_at_heartbeats_when_it_changed(self):
        job = self.enqueue({})
        # Written atomically (a rename); each step when the test says so.
        script = (
            'put() { printf "%s" "$1" > "$PGQ_PROGRESS_FILE.tmp";'
            ' mv "$PGQ_PROGRESS_FILE.tmp" "$PGQ_PROGRESS_FILE"; }; '
            "put 'not json {'; "
            'until [ -e "$OUT/step2" ]; do sleep 0.02; done; put \'{"done": 10}\'; '
            'until [ -e "$OUT/step3" ]; do sleep 0.02; done; put \'{"done": 90}\'; ' + GATE
        )
        # A 1 s lease: a heartbeat (extend, then the progress file) every 0.5 s.
        proc = self.start("--once", "--lease", "1 second", command=["sh", "-c", script])
        wait_for(
            "the bad progress to be skipped",
            lambda: f"job {job} (attempt 1): progress file skipped" in self.log(proc),
        )
        self.assertEqual((self.info(job)["state"], self.info(job)["progress"]), ("running", None))
        open(self.path("step2"), "w").close()
        wait_for("the first progress", lambda: self.info(job)["progress"] == {"done": 10})
        self.assertEqual(self.info(job)["state"], "running")
        open(self.path("step3"), "w").close()
        wait_for("the second progress", lambda: self.info(job)["progress"] == {"done": 90})
        self.open_gate()
        code, log = self.finish(proc)
        self.assertEqual(code, 0, log)
        self.assertCompleted(job)
        # The refused text was not sent (nor warned about) again at each heartbeat.
        self.assertEqual(log.count("progress file skipped"), 1, log)

    def test_snooze_exit_code_snoozes_without_spending_the_attempt(self):
        from_file = self.enqueue({"kind": "file"}, priority=3)
        default = self.enqueue({"kind": "default"}, priority=2)
        bad_file = self.enqueue({"kind": "bad"}, priority=1)
        # The first run of each snoozes (exit 42), a second one completes.
        script = (
            'payload=$(cat); echo "$PGQ_JOB_ATTEMPT" >> "$OUT/runs.$PGQ_JOB_ID"; '
            '[ -e "$OUT/snoozed.$PGQ_JOB_ID" ] && exit 0; touch "$OUT/snoozed.$PGQ_JOB_ID"; '
            'case "$payload" in '
            "*file*) echo '1 hour' > \"$PGQ_SNOOZE_FILE\";; "
            "*bad*) echo 'after lunch' > \"$PGQ_SNOOZE_FILE\";; "
            "esac; exit 42"
        )
        # 5 claims: from_file once (then an hour away), the two others twice.
        code, log = self.run_worker(
            "--max-jobs", "5", "--wait", "10 seconds", "--snooze-exit-code", "42",
            "--snooze-delay", "1 second", command=["sh", "-c", script],
        )
        self.assertEqual(code, 0, log)
        # The delay the command wrote: pending, due in an hour, run once.
        job = self.info(from_file)
        now = self.sql("SELECT pgq.clock()")[0][0]
        self.assertEqual(job["state"], "scheduled", job)
        self.assertGreater(job["run_at"], now + timedelta(minutes=55))
        self.assertLess(job["run_at"], now + timedelta(minutes=61))
        self.assertEqual(self.read(f"runs.{from_file}"), "1\n")
        # --snooze-delay (1 s), then claimed again with the same attempt
        # number: the snooze did not spend it.
        self.assertEqual(self.read(f"runs.{default}"), "1\n1\n")
        self.assertCompleted(default)
        # Not an interval: --snooze-delay instead, and a warning.
        self.assertEqual(self.read(f"runs.{bad_file}"), "1\n1\n")
        self.assertCompleted(bad_file)
        self.assertIn(f"job {bad_file} (attempt 1): its snooze file's 'after lunch'", log)
        self.assertEqual(log.count("warning: "), 1, log)
        self.assertNotIn("failed", log)

    def test_unknown_exit_code_leaves_the_job_to_its_lease(self):
        job = self.enqueue({})
        script = (
            'echo "$PGQ_JOB_ATTEMPT" >> "$OUT/runs"; [ "$PGQ_JOB_ATTEMPT" = 1 ] && exit 76; '
            'touch "$OUT/second"; ' + GATE
        )
        # A worker that keeps claiming (no --once), so it could take the job
        # again itself; a 2 s lease (a heartbeat every second).
        proc = self.start(
            "--lease", "2 seconds", "--wait", "1 second", "--unknown-exit-code", "76",
            command=["sh", "-c", script],
        )
        wait_for("the outcome unknown", lambda: "outcome unknown" in self.log(proc))
        self.assertIn(f"job {job} (attempt 1): outcome unknown (exit status 76)", self.log(proc))
        first = self.info(job)
        # Neither completed, nor failed, nor released: still claimed.
        self.assertEqual((first["state"], first["attempt"]), ("running", 1), first)
        self.assertIsNone(first["last_error"])
        lease_end = first["lease_until"]

        def claimed_again():
            self.sql("SELECT * FROM pgq.maintain()")  # expires leases that ran out
            if self.exists("second"):
                return True
            now = self.info(job)
            if now["attempt"] == 1:
                # Still claimed and not extended (no heartbeat), or expired
                # by maintenance and ready: never failed nor released.
                self.assertIn(now["state"], ("running", "ready"), now)
                if now["state"] == "running":
                    self.assertEqual(now["lease_until"], lease_end, now)
                else:
                    self.assertEqual(now["last_error"], "lease expired", now)
            return False

        wait_for("the job to be claimed again", claimed_again)
        second = self.info(job)
        self.assertEqual((second["state"], second["attempt"]), ("running", 2), second)
        # Claimed again only once the first lease had run out.
        self.assertGreaterEqual(second["claimed_at"], lease_end)
        self.assertEqual(self.read("runs"), "1\n2\n")
        self.open_gate()
        wait_for("the second run to complete", lambda: self.job(job) is None)
        os.kill(proc.pid, signal.SIGTERM)
        code, log = self.finish(proc)
        self.assertEqual(code, 0, log)
        self.assertCompleted(job)
        self.assertEqual(log.count("outcome unknown"), 1, log)

    def cancel_while_running(self, job, proc):
        """Cancels the running job from the test's own connection once the
        command has started; returns when the command got SIGTERM."""
        wait_for("the command to start", lambda: self.exists("started"))
        self.assertEqual(self.info(job)["state"], "running")
        self.assertEqual(self.sql("SELECT pgq.cancel(%s)", job), [(True,)])
        cancelled = time.monotonic()
        # Within about one heartbeat (1 s with the 2 s lease), with room.
        wait_for("the command's SIGTERM", lambda: self.exists("term"), timeout=5)
        self.assertLess(time.monotonic() - cancelled, 5)
        return float(self.read("term") or 0)

    def test_cancel_sends_sigterm_to_the_running_command(self):
        job = self.enqueue({})
        script = (
            "trap 'touch \"$OUT/term\"; exit 0' TERM; touch \"$OUT/started\"; "
            "while :; do sleep 0.05; done"
        )
        proc = self.start(
            "--once", "--lease", "2 seconds", "--kill-grace", "30 seconds",
            command=["sh", "-c", script],
        )
        self.cancel_while_running(job, proc)
        code, log = self.finish(proc)
        self.assertEqual(code, 0, log)
        self.assertIn(f"job {job} (attempt 1): cancelled; SIGTERM sent", log)
        self.assertIn("cancelled; its command ended (exit status 0): not completed nor failed", log)
        self.assertNotIn("did not end within --kill-grace", log)
        # Exit 0 did not complete it: it stays cancelled.
        self.assertEqual(self.info(job)["state"], "cancelled")
        self.assertEqual(self.dead(job)[2], "cancelled")

    def test_cancel_kills_a_command_ignoring_sigterm_after_kill_grace(self):
        job = self.enqueue({})
        program = (
            "import os, pathlib, signal, time\n"
            "out = pathlib.Path(os.environ['OUT'])\n"
            "signal.signal(signal.SIGTERM,"
            " lambda *_: (out / 'term').write_text(repr(time.monotonic())))\n"
            "(out / 'pid').write_text(str(os.getpid()))\n"
            "(out / 'started').touch()\n"
            "while True:\n"
            "    time.sleep(0.02)\n"
        )
        proc = self.start(
            "--once", "--lease", "2 seconds", "--kill-grace", "1 second",
            command=[sys.executable, "-c", program],
        )
        term_at = self.cancel_while_running(job, proc)
        code, log = self.finish(proc)
        # SIGKILL came --kill-grace after SIGTERM, not before.
        self.assertGreaterEqual(time.monotonic() - term_at, 0.9)
        self.assertEqual(code, 0, log)
        self.assertIn("did not end within --kill-grace: SIGKILL", log)
        self.assertIn("its command ended (killed by signal 9)", log)
        with self.assertRaises(ProcessLookupError):
            os.kill(int(self.read("pid")), 0)
        self.assertEqual(self.info(job)["state"], "cancelled")

