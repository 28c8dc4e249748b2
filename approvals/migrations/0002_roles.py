"""Role groups (reviewer, approver, auditor, operator, admin) with their permissions."""

from django.db import migrations


def roles_create(apps, schema_editor):  # type: ignore[no-untyped-def]
    from django.apps import apps as global_apps
    from django.contrib.auth.management import create_permissions

    # Permissions are normally created after all migrations; roles need them now.
    for label in ("runtime", "approvals"):
        config = global_apps.get_app_config(label)
        create_permissions(config, verbosity=0, apps=apps)

    from approvals.roles import roles_ensure

    roles_ensure(strict=False)


class Migration(migrations.Migration):
    dependencies = [
        ("approvals", "0001_initial"),
        ("runtime", "0002_checkpoint_tables"),
        ("auth", "0012_alter_user_first_name_max_length"),
        ("contenttypes", "0002_remove_content_type_name"),
    ]
    operations = [migrations.RunPython(roles_create, migrations.RunPython.noop)]
