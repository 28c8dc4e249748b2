"""Give the roles the long-term memory permissions (runtime.view_store / runtime.write_store)."""

from django.db import migrations


def roles_refresh(apps, schema_editor):  # type: ignore[no-untyped-def]
    from django.apps import apps as global_apps
    from django.contrib.auth.management import create_permissions

    create_permissions(global_apps.get_app_config("runtime"), verbosity=0, apps=apps)
    from approvals.roles import roles_ensure

    roles_ensure(strict=False)


class Migration(migrations.Migration):
    dependencies = [("approvals", "0016_time_travel_roles"), ("runtime", "0006_store")]
    operations = [migrations.RunPython(roles_refresh, migrations.RunPython.noop, elidable=False)]
