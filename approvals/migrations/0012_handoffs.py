# Hand-offs: claims move from the console to the domain (same table, same rows), leads may
# reassign tasks, reviewers may be away with a delegate.

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models


def claim_content_type_move(apps, schema_editor):  # type: ignore[no-untyped-def]
    # The permission rows (and any user's direct grant of them) follow the model to its new app:
    # re-point the content type instead of creating a second "release_any_claim".
    content_types = apps.get_model("contenttypes", "ContentType")
    if not content_types.objects.filter(app_label="approvals", model="taskclaim").exists():
        content_types.objects.filter(app_label="console", model="taskclaim").update(app_label="approvals")


def claim_content_type_back(apps, schema_editor):  # type: ignore[no-untyped-def]
    content_types = apps.get_model("contenttypes", "ContentType")
    if not content_types.objects.filter(app_label="console", model="taskclaim").exists():
        content_types.objects.filter(app_label="approvals", model="taskclaim").update(app_label="console")


def roles_refresh(apps, schema_editor):  # type: ignore[no-untyped-def]
    # Gives admins (and the new lead role) the moved and new permissions on existing installations.
    from django.apps import apps as global_apps
    from django.contrib.auth.management import create_permissions

    create_permissions(global_apps.get_app_config("approvals"), verbosity=0, apps=apps)
    from approvals.roles import roles_ensure

    roles_ensure(strict=False)


class Migration(migrations.Migration):

    dependencies = [
        ('approvals', '0011_task_assignment'),
        ('console', '0002_heartbeat'),
        ('contenttypes', '0002_remove_content_type_name'),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            # The table exists (console 0001 created it); only Django's idea of its owner changes.
            state_operations=[
                migrations.CreateModel(
                    name='TaskClaim',
                    fields=[
                        ('task', models.OneToOneField(on_delete=django.db.models.deletion.CASCADE, primary_key=True, related_name='claim', serialize=False, to='approvals.approvaltask')),
                        ('claimed_at', models.DateTimeField()),
                        ('expires_at', models.DateTimeField(db_index=True)),
                        ('user', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='+', to=settings.AUTH_USER_MODEL)),
                    ],
                    options={
                        'db_table': 'console_taskclaim',
                        'permissions': [('release_any_claim', 'Can release a task claimed by someone else'), ('reassign_task', 'Can reassign approval tasks to a person or a group (leads)')],
                        'indexes': [models.Index(fields=['user', 'expires_at'], name='claim_user_expires')],
                    },
                ),
            ],
            database_operations=[],
        ),
        migrations.RunPython(claim_content_type_move, claim_content_type_back),
        migrations.CreateModel(
            name='Away',
            fields=[
                ('user', models.OneToOneField(on_delete=django.db.models.deletion.CASCADE, primary_key=True, related_name='away', serialize=False, to=settings.AUTH_USER_MODEL)),
                ('starts_at', models.DateTimeField(blank=True, null=True)),
                ('ends_at', models.DateTimeField(blank=True, null=True)),
                ('note', models.CharField(blank=True, default='', max_length=300)),
                ('updated_at', models.DateTimeField(auto_now=True)),
                ('delegate', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='+', to=settings.AUTH_USER_MODEL)),
            ],
        ),
        migrations.RunPython(roles_refresh, migrations.RunPython.noop),
    ]
