from django.db import migrations


def roles_refresh(apps, schema_editor):  # type: ignore[no-untyped-def]
    # Gives the operator and admin roles the new "runtime.time_travel" permission on existing installations.
    from django.apps import apps as global_apps
    from django.contrib.auth.management import create_permissions

    create_permissions(global_apps.get_app_config("runtime"), verbosity=0, apps=apps)
    from approvals.roles import roles_ensure

    roles_ensure(strict=False)


class Migration(migrations.Migration):
    dependencies = [
        ("approvals", "0015_dashboard"),
        ("runtime", "0005_branches"),
    ]

    operations = [migrations.RunPython(roles_refresh, migrations.RunPython.noop)]
