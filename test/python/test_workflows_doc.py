"""docs/workflows.md says its SQL runs as written, in order, on a fresh
installation: run every block of it, statement by statement, and check
that what the page says happens does."""
import os

import doc_sql
from test_concurrency import PgqTestCase

PAGE = os.path.join(os.path.dirname(__file__), "..", "..", "docs", "workflows.md")


class WorkflowsDocTest(PgqTestCase):
    def test_every_block_runs_and_does_what_the_page_says(self):
        blocks, statements = doc_sql.statements(PAGE)
        self.assertGreaterEqual(blocks, 7)
        claimed = []
        for statement in statements:
            cur = self.admin.execute(statement)
            if "AS claimed" in statement:
                claimed.append(cur.fetchone()[0])
        self.assertEqual(claimed, [5, 0], "the cap leaves room for 5, then none")

        def stats(queue):
            return self.admin.execute(
                "SELECT ready, running, max_running, awaiting_parents, dead FROM pgq.queue_stats"
                " WHERE queue = %s", (queue,)).fetchone()

        self.assertEqual(stats("sms"), (15, 5, 5, 0, 0))
        self.assertEqual(stats("crm"), (2, 4, None, 0, 0), "two of each customer run")
        self.assertEqual(stats("urgent")[1], 1)
        # Invoice 42's email was claimed after its PDF; 43's two dependents
        # died with it.
        self.assertEqual(self.admin.execute(
            "SELECT payload, reason FROM pgq.dead_jobs WHERE queue = 'send' ORDER BY id").fetchall(),
            [({"invoice": 43}, "dependency_failed"), ({"audit": 43}, "dependency_failed")])
        self.assertEqual(stats("send")[:4], (0, 1, None, 0))
        self.assertEqual(self.admin.execute(
            "SELECT state, open_parents FROM pgq.list_jobs('albums')").fetchall(), [("ready", None)])
        self.assertEqual(self.scalar("SELECT count(*) FROM pgq.job_dependencies"), 0)
