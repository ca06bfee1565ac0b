"""docs/fairness.md says its SQL runs as written, in order, on a fresh
installation: run every block of it, statement by statement, and check
that what the page says happens does."""
import os

import doc_sql
from test_concurrency import PgqTestCase

PAGE = os.path.join(os.path.dirname(__file__), "..", "..", "docs", "fairness.md")


class FairnessDocTest(PgqTestCase):
    def test_every_block_runs_and_does_what_the_page_says(self):
        blocks, statements = doc_sql.statements(PAGE)
        self.assertGreaterEqual(blocks, 5)
        results = {}
        for statement in statements:
            cur = self.admin.execute(statement)
            if cur.description is not None:
                row = cur.fetchone()
                for column, value in zip(cur.description, row or ()):
                    results[column.name] = value
        # One job of each tenant, not three of acme's import.
        self.assertEqual(results["fair_claim"], "acme globex initech")
        self.assertEqual(results["acme_weight"], 3)
        self.assertEqual(results["fairness"], "group")
        self.assertEqual(results["rate_limit_per_key"], 80)
        # Backpressure: full, refused, room once 20 were sent.
        self.assertEqual(results["queued"], 100)
        self.assertIs(results["room_now"], False)
        self.assertEqual(results["sent"], 20)
        self.assertIs(results["room_after"], True)
        self.assertEqual((results["kept"], results["found"]), (80, 80))
