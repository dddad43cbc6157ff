"""The peak memory of one request, measured in a process of its own (issue #26).

`python -m tests.peak_memory <probe> [arg]` sets Django up on the test database
(KB_DB_NAME), sends one small request of the same kind first (every module it
needs then loaded), then the probe's request through the test Client, and prints
JSON: the response's status and text, how far this process's peak resident size
(ru_maxrss) rose during the request, and the peak of the largest child process it
waited for (a forked check), both in MB. Rows it needs are made in a transaction
rolled back at the end; files go to a temporary media root.

Probes: `login` posts 10 MB of "%41" to the admin's sign-in page, unsigned in;
`upload <pdf path>` uploads the PDF as a superuser.
"""

from __future__ import annotations

import json
import os
import resource
import sys
import tempfile
from pathlib import Path

PERCENT_BODY_BYTES = 10 * 1024 * 1024
URLENCODED = "application/x-www-form-urlencoded"


def peak_mb(who: int = resource.RUSAGE_SELF) -> float:
    return resource.getrusage(who).ru_maxrss / 1024  # KB on Linux


def login_probe(client) -> tuple:
    from django.urls import reverse

    url = reverse("admin:login")
    client.post(url, b"username=a&password=b", content_type=URLENCODED)
    body = b"%41" * (PERCENT_BODY_BYTES // 3)
    before = peak_mb()
    return before, client.post(url, body, content_type=URLENCODED)


def upload_probe(client, pdf: str) -> tuple:
    from django.contrib.auth import get_user_model
    from django.core.files.uploadedfile import SimpleUploadedFile
    from django.urls import reverse

    from kb.models import Collection

    user = get_user_model().objects.create_superuser("peak-probe", "", "pw-peak-1")
    collection = Collection.objects.create(name="Peak probe")
    client.force_login(user)
    url = reverse("admin:kb_source_upload")

    def upload(data: bytes):
        files = [SimpleUploadedFile("probe.pdf", data)]
        return client.post(url, {"collection": collection.pk, "files": files})

    upload(b"%PDF-1.7\n%%EOF\n")  # refused as corrupt, pdfium loaded
    data = Path(pdf).read_bytes()
    before = peak_mb()
    return before, upload(data)


def main(probe: str, *args: str) -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    import django

    django.setup()
    from django.db import transaction
    from django.test import Client, override_settings
    from django.test.utils import setup_test_environment

    setup_test_environment()
    probes = {"login": login_probe, "upload": upload_probe}
    with tempfile.TemporaryDirectory() as media, override_settings(MEDIA_ROOT=media):
        with transaction.atomic():
            before, response = probes[probe](Client(), *args)
            transaction.set_rollback(True)
    outcome = {
        "status": response.status_code,
        "text": response.content.decode(errors="replace"),
        "growth_mb": peak_mb() - before,
        "before_mb": before,
        "child_peak_mb": peak_mb(resource.RUSAGE_CHILDREN),
    }
    print(json.dumps(outcome))


if __name__ == "__main__":
    main(*sys.argv[1:])
