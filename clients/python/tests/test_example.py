"""The examples, run as their users would (--demo).

examples/welcome_email.py: the signups that commit get exactly one welcome
email each; the one whose card is declined gets neither an account nor an
email. The mail API's first call times out after sending: that job's
outcome is unknown, it runs again after its lease, and the idempotency key
keeps it to one email.

examples/render_then_send.py: one worker over the queues render and send;
each send job runs only after its render job is done, and the one whose
render dies goes to dead-letter as dependency_failed without running.

examples/audit_stream.py: transfers publish their event in their own
transaction, through a topic subscribed to a stream; the declined one
leaves neither balances nor an event. A StreamConsumer records each event
once, although its first batch comes twice (the handler fails after
recording it)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from support import DSN, HANG, PgqTestCase

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
EXAMPLE = EXAMPLES / "welcome_email.py"


def run_demo(example: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(example), "--dsn", DSN, "--demo"],
        capture_output=True, text=True, timeout=HANG,
    )


class WelcomeEmailExampleTest(PgqTestCase):
    def setUp(self) -> None:
        super().setUp()
        self.admin.execute("DROP TABLE IF EXISTS welcome_emails_sent, users")

    def test_demo(self) -> None:
        done = run_demo(EXAMPLE)
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


class RenderThenSendExampleTest(PgqTestCase):
    def setUp(self) -> None:
        super().setUp()
        self.admin.execute("DROP TABLE IF EXISTS invoice_emails_sent, invoice_documents, invoices")

    def test_demo(self) -> None:
        done = run_demo(EXAMPLES / "render_then_send.py")
        self.assertEqual(done.returncode, 0, done.stderr)
        log = done.stderr
        self.assertIn("3 invoices ordered, 2 sent after their render, 1 not sent", log)
        # Right after the order's commit, every send job waits for its render.
        self.assertEqual(log.count("waiting for 1 parent(s)"), 3, log)
        self.assertEqual(log.count("worker of queues 'render', 'send' starting"), 1, log)
        # Each send handler found its render job done when it started.
        sends = [line for line in log.splitlines() if ": sending invoice " in line]
        self.assertEqual(len(sends), 2, log)
        self.assertTrue(all(line.endswith(" is done") for line in sends), sends)
        self.assertEqual(log.count(": in order"), 2, log)
        self.assertEqual(log.count("OUT OF ORDER"), 0, log)
        # The database agrees: a document before each email, and bob's
        # invoice (no template for its currency) neither rendered nor sent.
        invoices = self.admin.execute(
            "SELECT split_part(i.email, '+', 1), d.rendered_at < s.sent_at, s.sent_at IS NULL"
            "  FROM invoices i LEFT JOIN invoice_documents d ON d.invoice_id = i.id"
            "  LEFT JOIN invoice_emails_sent s ON s.invoice_id = i.id ORDER BY i.id"
        ).fetchall()
        self.assertEqual(invoices, [("ann", True, False), ("bob", None, True), ("eve", True, False)])
        dead = self.admin.execute(
            "SELECT queue, reason, attempts FROM pgq.dead_jobs ORDER BY id"
        ).fetchall()
        self.assertEqual(dead, [("render", "exhausted", 3), ("send", "dependency_failed", 0)])
        self.assertEqual(self.live_jobs(), 0)


class AuditStreamExampleTest(PgqTestCase):
    def setUp(self) -> None:
        super().setUp()
        self.admin.execute("DROP TABLE IF EXISTS audit_trail, audit_accounts")

    def test_demo(self) -> None:
        done = run_demo(EXAMPLES / "audit_stream.py")
        self.assertEqual(done.returncode, 0, done.stderr)
        log = done.stderr
        self.assertIn("2 transfers made, 1 declined; 2 in the audit trail", log)
        self.assertEqual(log.count("declined: eve cannot pay 500; no balance changed, no event"), 1)
        self.assertEqual(log.count("consumer 'audit_trail' of stream 'audit': registered"), 1, log)
        # The first batch failed once after it was recorded, came again, and
        # found its events recorded already.
        self.assertEqual(log.count("the handler raised ConnectionError"), 1, log)
        again = log.count("was recorded already")
        self.assertIn(again, (1, 2), log)  # the first batch held one transfer or both
        paid = [line for line in log.splitlines() if ": event " in line and " paid " in line]
        self.assertEqual(len(paid), 2, log)
        trail = self.admin.execute(
            "SELECT from_owner, to_owner, amount::text FROM audit_trail ORDER BY event_id"
        ).fetchall()
        self.assertEqual(trail, [("ann", "bob", "30.00"), ("bob", "eve", "10.00")])
        balances = self.admin.execute(
            "SELECT owner, balance::text FROM audit_accounts ORDER BY owner"
        ).fetchall()
        self.assertEqual(balances, [("ann", "70.00"), ("bob", "70.00"), ("eve", "10.00")])
        stats = self.admin.execute(
            "SELECT pending_events, batch_open, finished_events FROM pgq.stream_stats"
            " WHERE stream = 'audit' AND consumer = 'audit_trail'"
        ).fetchone()
        self.assertEqual(stats, (0, False, 2))
