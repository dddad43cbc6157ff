from __future__ import annotations

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError
from django.utils import timezone

from kb import access
from kb.models import ApiToken


class Command(BaseCommand):
    help = (
        "Create an API token for POST /api/ask acting as USERNAME (printed once), "
        "list tokens (--list) or revoke one (--revoke NAME_OR_ID)."
    )

    def add_arguments(self, parser):
        parser.add_argument("username", nargs="?")
        parser.add_argument("--name", default="cli", help="What the token is for.")
        parser.add_argument(
            "--expires-days",
            type=int,
            metavar="N",
            help="The token stops working N days from now (default: never).",
        )
        parser.add_argument(
            "--list", action="store_true", help="List tokens; never their secrets."
        )
        parser.add_argument(
            "--revoke",
            metavar="NAME_OR_ID",
            help="Revoke the token with this id, or every token of this name.",
        )

    def handle(self, *args, **options):
        if options["list"]:
            return self._list()
        if options["revoke"]:
            return self._revoke(options["revoke"])
        if not options["username"]:
            raise CommandError("Give a USERNAME, --list or --revoke NAME_OR_ID.")
        days = options["expires_days"]
        if days is not None and days < 1:
            raise CommandError("--expires-days must be 1 or more.")
        User = get_user_model()
        user = User.objects.filter(username=options["username"]).first()
        if user is None:
            raise CommandError(f"No user {options['username']!r}")
        name = options["name"]
        taken = ApiToken.objects.filter(name=name, revoked__isnull=True).first()
        if taken is not None:
            raise CommandError(
                f"A token named {name!r} is in use (id {taken.pk}, for "
                f"{taken.user.get_username()}); give this one another --name, so "
                "that --revoke NAME revokes only the token you mean, or revoke "
                "that one first."
            )
        key = access.create_token(user, name, expires_days=days)
        self.stdout.write(key)

    def _list(self) -> None:
        now = timezone.now()
        tokens = ApiToken.objects.select_related("user").order_by("pk")
        self.stdout.write("id\tname\tuser\tcreated\tlast used\texpires\tstate")
        for t in tokens:
            self.stdout.write(
                "\t".join(
                    [
                        str(t.pk),
                        t.name,
                        t.user.get_username(),
                        _when(t.created),
                        _when(t.last_used),
                        _when(t.expires),
                        t.state(now),
                    ]
                )
            )

    def _revoke(self, name_or_id: str) -> None:
        tokens = access.find_tokens(name_or_id)
        if not tokens.exists():
            raise CommandError(f"No token with the id or name {name_or_id!r}")
        count = access.revoke(tokens)
        self.stdout.write(f"Revoked {count} token(s) ({name_or_id}).")


def _when(moment) -> str:
    return moment.strftime("%Y-%m-%d %H:%M") if moment else "-"
