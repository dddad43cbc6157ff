from __future__ import annotations

import re
from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.test import TransactionTestCase

from kb.demo import load_demo
from kb.models import ApiToken
from tests.base import make_users

ROW_RE = re.compile(
    r"^\| (\d+) \| 1 \| (\d+) \| ([\d.]+) \| (\d+) \| (\d+) \| (\d+) \| (\d+) \|$"
)


@pytest.mark.slow
class LoadCommandTestCase(TransactionTestCase):
    # TransactionTestCase: gunicorn is another process and sees only committed rows.

    def test_it_drives_the_api_through_gunicorn_and_prints_a_table(self):
        make_users()
        load_demo(sync=True)
        out = StringIO()
        call_command(
            "kb_load",
            "--workers",
            "2",
            "--concurrency",
            "1",
            "4",
            "--seconds",
            "1",
            stdout=out,
            stderr=StringIO(),
        )
        rows = [ROW_RE.match(line) for line in out.getvalue().splitlines()]
        rows = [row.groups() for row in rows if row]
        self.assertEqual([row[0] for row in rows], ["1", "4"], out.getvalue())
        for _, answered, per_s, p50, p95, p99, errors in rows:
            self.assertGreater(int(answered), 0)
            self.assertGreater(float(per_s), 0)
            self.assertTrue(0 < int(p50) <= int(p95) <= int(p99))
            self.assertEqual(errors, "0")
        self.assertFalse(ApiToken.objects.exists())  # the temporary token is gone

    def test_a_url_needs_a_token(self):
        with self.assertRaisesMessage(CommandError, "--url needs --token"):
            call_command("kb_load", "--url", "http://127.0.0.1:9")
