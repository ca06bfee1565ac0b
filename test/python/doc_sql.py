"""The SQL of a documentation page that says its blocks run as written, in
order, on a fresh installation (docs/workflows.md, docs/fairness.md)."""
import re


def statements(page):
    """Every statement of the page's ```sql blocks, in order: a statement
    ends at a semicolon at the end of a line (the pages have none inside
    their strings); blocks and statements of comments alone are left out.
    Also the number of blocks, which each test checks against its page."""
    with open(page, encoding="utf-8") as f:
        blocks = re.findall(r"```sql\n(.*?)```", f.read(), re.S)
    found = []
    for block in blocks:
        for statement in re.split(r";\s*\n", block):
            code = [l for l in statement.splitlines() if l.strip() and not l.strip().startswith("--")]
            if code:
                found.append(statement)
    return len(blocks), found
