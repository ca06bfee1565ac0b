"""docs/reference.md cannot drift from the installed catalog (issue 8): every
function of schema pgq has exactly one signature line there, as
pg_get_function_arguments -> pg_get_function_result prints it, and every
signature line there is an installed function. Each queue function's
section says who may call it, and the page names only SQLSTATEs the
functions are known to raise."""
import os
import re

from test_concurrency import PgqTestCase
from test_fuzz import DOCUMENTED

REFERENCE = os.path.join(os.path.dirname(__file__), "..", "..", "docs", "reference.md")
SIGNATURE = re.compile(r"^`(pgq\.[a-z_]+\(.*\) → .+)`$")


class ReferenceTest(PgqTestCase):
    def test_every_installed_function_is_documented_with_its_signature(self):
        with open(REFERENCE, encoding="utf-8") as f:
            text = f.read()
        documented = [m.group(1) for line in text.splitlines() if (m := SIGNATURE.match(line))]
        installed = [r[0] for r in self.admin.execute(
            "SELECT format('pgq.%s(%s) → %s', p.proname, pg_get_function_arguments(p.oid),"
            "              pg_get_function_result(p.oid))"
            "  FROM pg_proc p WHERE p.pronamespace = 'pgq'::regnamespace ORDER BY 1").fetchall()]
        self.assertEqual(len(documented), len(set(documented)), "a signature is documented twice")
        self.assertEqual(sorted(documented), installed)

    def test_every_queue_function_says_who_may_call_it_and_names_known_codes(self):
        with open(REFERENCE, encoding="utf-8") as f:
            text = f.read()
        queue_part, coordination = text.split("## Coordination", 1)
        sections = re.split(r"^### ", queue_part, flags=re.M)[1:]
        self.assertGreaterEqual(len(sections), 27)
        for section in sections:
            name = section.split("\n", 1)[0]
            with self.subTest(function=name):
                self.assertRegex(section, r"Right:|Anyone may call it|For the |Who may")
        # Every SQLSTATE the page names is one the fuzz test accepts from a
        # caller's mistakes, or a documented refusal.
        codes = set(re.findall(r"\b(?=[0-9A-Z]*\d)[0-9A-Z]{5}\b", text))
        self.assertLessEqual(codes, DOCUMENTED | {"0A000", "42710"}, codes - DOCUMENTED)
        self.assertIn("42501", codes)

    def test_every_function_view_and_table_says_what_it_is(self):
        # COMMENT ON for each (issue 16): psql's \df+ and \d+ show it.
        missing = self.admin.execute(
            "SELECT p.oid::regprocedure::text FROM pg_proc p"
            " WHERE p.pronamespace = 'pgq'::regnamespace"
            "   AND coalesce(obj_description(p.oid, 'pg_proc'), '') = ''"
            " UNION ALL "
            "SELECT c.oid::regclass::text FROM pg_class c"
            " WHERE c.relnamespace = 'pgq'::regnamespace AND c.relkind IN ('r', 'v')"
            "   AND coalesce(obj_description(c.oid, 'pg_class'), '') = ''").fetchall()
        self.assertEqual(missing, [])
