"""examples/welcome_email.py --demo: the signups that commit get exactly one
welcome email each; the one whose card is declined gets neither an account
nor an email. The mail API's first call times out after sending: that job's
outcome is unknown, it runs again after its lease, and the idempotency key
keeps it to one email."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from support import DSN, HANG, PgqTestCase

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "welcome_email.py"


class WelcomeEmailExampleTest(PgqTestCase):
    def setUp(self) -> None:
        super().setUp()
        self.admin.execute("DROP TABLE IF EXISTS welcome_emails_sent, users")

    def test_demo(self) -> None:
        done = subprocess.run(
            [sys.executable, str(EXAMPLE), "--dsn", DSN, "--demo"],
            capture_output=True, text=True, timeout=HANG,
        )
        self.assertEqual(done.returncode, 0, done.stderr)
        log = done.stderr
        self.assertIn("2 signed up, 2 welcomed", log)
        self.assertEqual(log.count("outcome unknown"), 1, log)
        self.assertEqual(log.count("Welcome aboard!"), 2, log)  # emails actually sent
        self.assertEqual(log.count("not again (same idempotency key)"), 1, log)
        # The results, read back with list_jobs: one job needed a second attempt.
        self.assertEqual(log.count("done on attempt 1: {'message_id': 'msg-"), 1, log)
        self.assertEqual(log.count("done on attempt 2: {'message_id': 'msg-"), 1, log)
        users = self.admin.execute(
            "SELECT split_part(u.email, '+', 1), s.user_id IS NOT NULL"
            "  FROM users u LEFT JOIN welcome_emails_sent s ON s.user_id = u.id ORDER BY u.id"
        ).fetchall()
        self.assertEqual(users, [("ann", True), ("eve", True)])
        self.assertEqual(self.live_jobs(), 0)
        self.assertEqual(self.scalar("SELECT count(*) FROM pgq.dead_jobs"), 0)
        # Read until it holds: a maintenance flush can make done_recent read
        # off for a moment.
        self.wait_for(
            "two completions counted",
            lambda: self.scalar(
                "SELECT done_recent FROM pgq.queue_stats WHERE queue = 'welcome_email'"
            )
            == 2,
        )
