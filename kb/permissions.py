"""Staff groups: content editors manage sources; admins also change policies."""

from __future__ import annotations

from django.contrib.auth.models import Group, Permission

CONTENT_EDITOR = "content editor"
ADMIN = "admin"
POLICY_REFUSED = (
    "Only admins (the admin group or superusers) can change a collection's "
    "metadata policy."
)

# codename prefixes per model, per group
_EDITOR_PERMS = {
    "source": ["add", "change", "delete", "view"],
    "section": ["view"],
    "chunk": ["view"],
    "overflowrejection": ["view"],
    "collection": ["view"],
    "goldencase": ["add", "change", "delete", "view"],
    "evalrun": ["view"],
    # Sync sources: editors see them, their logs, and run "Sync now"; admins
    # add and change them (a sync reads a server folder or another site).
    "syncsource": ["view"],
    "syncrun": ["view"],
}
_ADMIN_MODELS = [
    "collection",
    "source",
    "section",
    "chunk",
    "overflowrejection",
    "goldencase",
    "evalrun",
    "question",
    "replayreport",
    "syncsource",
    "syncrun",
]


def _perms(spec: dict[str, list[str]]) -> list[Permission]:
    codenames = [
        f"{action}_{model}" for model, actions in spec.items() for action in actions
    ]
    return list(
        Permission.objects.filter(content_type__app_label="kb", codename__in=codenames)
    )


def ensure_groups() -> list[str]:
    """Create or refresh both groups; idempotent."""
    editor, _ = Group.objects.get_or_create(name=CONTENT_EDITOR)
    editor.permissions.set(_perms(_EDITOR_PERMS))
    admin, _ = Group.objects.get_or_create(name=ADMIN)
    admin.permissions.set(
        _perms({m: ["add", "change", "delete", "view"] for m in _ADMIN_MODELS})
    )
    return [CONTENT_EDITOR, ADMIN]


def can_change_policy(user) -> bool:
    return user.is_superuser or user.groups.filter(name=ADMIN).exists()
