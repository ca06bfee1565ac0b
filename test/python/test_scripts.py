"""The scripts run tools as other OS users (PostgreSQL's as postgres, the
brokers as $PGQ_BROKER_USER) from a clone that those users may not be able
to read: a clone under /root, or in a mktemp -d (issue 30, the newcomer
path). So every switch of user goes through scripts/lib.sh's as_user, which
runs the tool from /, and no tool run as another user is handed a file of
the clone by its path. No database needed; the checks that switch user run
as root only (as scripts/test.sh does)."""
import glob
import os
import re
import shutil
import subprocess
import tempfile
import unittest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
LIB = os.path.join(ROOT, "scripts", "lib.sh")
SWITCHES_USER = re.compile(r"\b(runuser|setpriv|sudo\s+-u|su\s+(-\s+)?[-\w]+\s+-c)\b")
AS_OTHER_USER = re.compile(r"\bas_(pg|broker|user)\s")
# A path inside the clone, given to the tool; one on stdin is fine (the
# caller opens it), so input redirections are left out first.
CLONE_PATH = re.compile(r"\$\{?(PGQ_ROOT|HERE|ROOT)\b")
STDIN_FROM = re.compile(r"(?<!<)<\s*(\"[^\"]*\"|\S+)")


def script_files():
    """Every shell script, Makefile, Perl and Python file of the tree (not node_modules, not this file)."""
    found = []
    for dirpath, dirnames, filenames in os.walk(ROOT):
        dirnames[:] = [d for d in dirnames if d not in ("node_modules", ".git", "build", "tmp_check")]
        for name in filenames:
            path = os.path.join(dirpath, name)
            if path == os.path.abspath(__file__):
                continue
            if name.endswith((".sh", ".pl", ".pm", ".py", ".mk")) or name == "Makefile":
                found.append(path)
    return sorted(found)


def logical_lines(path):
    """The file's lines with backslash continuations joined, comments dropped."""
    with open(path, encoding="utf-8") as f:
        text = f.read().replace("\\\n", " ")
    return [line for line in text.splitlines() if not line.lstrip().startswith("#")]


def as_root_with_lib(command, cwd):
    return subprocess.run(["bash", "-c", f'source "{LIB}"; {command}'], cwd=cwd,
                          capture_output=True, text=True, timeout=60)


class ScriptsTest(unittest.TestCase):
    def test_only_as_user_switches_user(self):
        wrong = []
        for path in script_files():
            for line in logical_lines(path):
                if SWITCHES_USER.search(line):
                    wrong.append(f"{os.path.relpath(path, ROOT)}: {line.strip()}")
        # The one place: as_user in scripts/lib.sh, and its runuser line is found.
        self.assertEqual([w for w in wrong if not w.startswith("scripts/lib.sh: (cd / && exec runuser ")], [])
        self.assertEqual(len(wrong), 1, wrong)

    def test_no_clone_path_is_handed_to_another_user(self):
        wrong = []
        for path in script_files():
            if not path.endswith(".sh"):
                continue
            for line in logical_lines(path):
                match = AS_OTHER_USER.search(line)
                if match and CLONE_PATH.search(STDIN_FROM.sub("", line[match.start():])):
                    wrong.append(f"{os.path.relpath(path, ROOT)}: {line.strip()}")
        self.assertEqual(wrong, [])

    @unittest.skipUnless(hasattr(os, "geteuid") and os.geteuid() == 0 and shutil.which("runuser"),
                         "switching user needs root")
    def test_as_pg_and_as_broker_run_from_a_directory_they_can_read(self):
        user = subprocess.run(["bash", "-c", f'source "{LIB}"; echo "$PGQ_OS_USER"'],
                              capture_output=True, text=True, check=True).stdout.strip()
        try:
            subprocess.run(["id", "-u", user], capture_output=True, check=True)
        except subprocess.CalledProcessError:
            self.skipTest(f"no OS user {user}")
        # Where a newcomer's clone is: a directory only root may enter.
        with tempfile.TemporaryDirectory() as private:
            os.chmod(private, 0o700)
            for helper in ("as_pg", "as_broker", f"as_user {user}"):
                result = as_root_with_lib(f"{helper} pwd; {helper} ls . >/dev/null; {helper} id -un", private)
                self.assertEqual(result.returncode, 0, f"{helper}: {result.stderr}")
                self.assertEqual(result.stdout.split(), ["/", user], helper)
                self.assertEqual(result.stderr, "", helper)
            # The exit status is the command's.
            self.assertEqual(as_root_with_lib("as_pg sh -c 'exit 7'", private).returncode, 7)


if __name__ == "__main__":
    unittest.main()
