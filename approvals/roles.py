"""Create the role groups with their permissions (idempotent)."""

from __future__ import annotations

from django.contrib.auth.models import Group, Permission

from approvals.permissions import ROLES


def roles_ensure(*, strict: bool = True) -> dict[str, Group]:
    """Create or update the role groups. Migrations pass ``strict=False``: an
    early migration runs before later permissions exist, and a later one
    refreshes the roles."""
    groups = {}
    for role, perms in ROLES.items():
        group, _ = Group.objects.get_or_create(name=role)
        wanted = []
        for dotted in perms:
            app_label, codename = dotted.split(".")
            perm = Permission.objects.filter(content_type__app_label=app_label, codename=codename).first()
            if perm is None and strict:
                raise LookupError(f"permission {dotted} does not exist (run migrate)")
            if perm is not None:
                wanted.append(perm)
        group.permissions.set(wanted)
        groups[role] = group
    return groups
