"""Create the role groups with their permissions (idempotent)."""

from __future__ import annotations

from django.contrib.auth.models import Group, Permission

from approvals.permissions import ROLES


def roles_ensure() -> dict[str, Group]:
    groups = {}
    for role, perms in ROLES.items():
        group, _ = Group.objects.get_or_create(name=role)
        wanted = []
        for dotted in perms:
            app_label, codename = dotted.split(".")
            wanted.append(Permission.objects.get(content_type__app_label=app_label, codename=codename))
        group.permissions.set(wanted)
        groups[role] = group
    return groups
