from __future__ import annotations

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from kb import access


class Command(BaseCommand):
    help = "Create an API token for POST /api/ask acting as USERNAME; prints it once."

    def add_arguments(self, parser):
        parser.add_argument("username")
        parser.add_argument("--name", default="cli", help="What the token is for.")

    def handle(self, *args, **options):
        User = get_user_model()
        user = User.objects.filter(username=options["username"]).first()
        if user is None:
            raise CommandError(f"No user {options['username']!r}")
        key = access.create_token(user, options["name"])
        self.stdout.write(key)
