"""The commit-message rules the hook and `make lint` apply (issue #31 item 7)."""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

from django.conf import settings
from django.test import SimpleTestCase

from config.commits import problems

BODY = "\n\nWhy, and what was measured.\n"


class CommitMessageTestCase(SimpleTestCase):
    def test_a_message_as_the_project_writes_them(self):
        for subject in [
            "Share one any-word budget among a collection's languages",
            "Bring one section of each record to a question about several",
            "Embed the question while keyword search runs",
        ]:
            with self.subTest(subject):
                self.assertEqual(problems(subject + BODY), [])

    def test_what_is_refused_and_why(self):
        cases = {
            "x" * 73 + BODY: "the subject has 73 characters (at most 72)",
            "Add a test." + BODY: "the subject ends with a full stop",
            "Added a test" + BODY: 'the subject starts "Added"',
            "Fixing the build" + BODY: 'the subject starts "Fixing"',
            "Fixes the build" + BODY: 'the subject starts "Fixes"',
            "Add a test": "no body after a blank line",
            "Add a test\nthe body at once\n": "no body after a blank line",
            "\n\nbody": "the subject is empty",
        }
        for message, reason in cases.items():
            with self.subTest(message[:20]):
                found = problems(message)
                self.assertTrue(any(reason in f for f in found), found)

    def test_git_s_comment_lines_are_not_the_message(self):
        message = "Add a test\n\nWhy.\n# Please enter the commit message\n#\n"
        self.assertEqual(problems(message), [])

    def test_the_hook_refuses_with_the_reasons(self):
        with tempfile.TemporaryDirectory() as folder:
            path = Path(folder) / "COMMIT_EDITMSG"
            path.write_text("Added things.\n")
            done = subprocess.run(
                [sys.executable, "-m", "config.commits", str(path)],
                cwd=settings.BASE_DIR,
                capture_output=True,
                text=True,
            )
        self.assertEqual(done.returncode, 1)
        self.assertIn("ends with a full stop", done.stderr)
        hook = Path(settings.BASE_DIR) / ".githooks" / "commit-msg"
        self.assertIn("config.commits", hook.read_text())
