from __future__ import annotations

import os
import secrets

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.core.management.base import BaseCommand

from config import services
from kb import permissions


class Command(BaseCommand):
    help = (
        "Prepare a working install: migrate, create the staff groups, create the "
        "admin account once (printing its generated password), load the demo content "
        "(an English and a French collection)."
    )

    def add_arguments(self, parser):
        parser.add_argument("--no-demo", action="store_true", help="Skip demo content.")
        parser.add_argument(
            "--sync",
            action="store_true",
            help="Index demo content in this process instead of enqueueing jobs.",
        )

    def handle(self, *args, **options):
        # For this user only (0700), also where no embedded server is used and
        # `python -m config.services start` never ran.
        postgres = not os.environ.get("DATABASE_URL")
        services.prepare_data_dir(settings.KB_DATA_DIR, postgres=postgres)
        call_command("migrate", interactive=False, verbosity=0)
        self.stdout.write("Database migrated.")
        for name in permissions.ensure_groups():
            self.stdout.write(f"Group ready: {name}")
        self._ensure_admin()
        self._ensure_model()
        if not options["no_demo"]:
            from kb.demo import load_demos

            load_demos(sync=options["sync"], stdout=self.stdout)
        self.stdout.write(self.style.SUCCESS("Setup complete."))

    def _ensure_model(self) -> None:
        """Build (or find) the ONNX graph now, not in the first job."""
        from kb import embedding

        embedder = embedding.get_embedder()
        embedder.embed(["warm-up"])
        self.stdout.write(
            f"Embedder ready: {embedder.model_name} ({embedder.precision}), window "
            f"{embedder.window} tokens, usable chunk budget {embedder.usable_window}."
        )

    def _ensure_admin(self) -> None:
        User = get_user_model()
        if User.objects.filter(username="admin").exists():
            self.stdout.write("Admin account exists (password shown on first setup).")
            return
        password = secrets.token_urlsafe(12)
        User.objects.create_superuser("admin", "admin@example.invalid", password)
        path = settings.KB_DATA_DIR / "admin_password.txt"
        services.write_private(path, password + "\n", replace=True)
        self.stdout.write(
            self.style.WARNING(
                f"Created admin account: user 'admin', password '{password}' "
                f"(also saved in {path}, readable by you only: delete it once read)"
            )
        )
