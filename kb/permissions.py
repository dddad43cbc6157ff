"""Staff groups: content editors manage sources; admins also change policies."""

from __future__ import annotations

from django.contrib.auth.models import Group, Permission
from django.db.models import Q, QuerySet

CONTENT_EDITOR = "content editor"
ADMIN = "admin"

# codename prefixes per model, per group
_EDITOR_PERMS = {
    "source": ["add", "change", "delete", "view"],
    "section": ["view"],
    "chunk": ["view"],
    "overflowrejection": ["view"],
    "collection": ["view"],
    "goldencase": ["add", "change", "delete", "view"],
    "evalrun": ["view"],
}
_ADMIN_MODELS = [
    "collection",
    "source",
    "section",
    "chunk",
    "overflowrejection",
    "goldencase",
    "evalrun",
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


def collections_for(user) -> QuerySet:
    """The collections a user may see and manage in the admin: a collection limited
    to groups is limited there too, not only on the ask page (superusers see all).
    Evaluation copies (is_scratch) carry their collection's groups."""
    from kb.models import Collection

    if not (user.is_authenticated and user.is_active and user.is_staff):
        return Collection.objects.none()
    if user.is_superuser:
        return Collection.objects.all()
    return Collection.objects.filter(
        Q(groups__isnull=True) | Q(groups__in=user.groups.all())
    ).distinct()
