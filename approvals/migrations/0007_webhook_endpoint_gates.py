"""Inbound endpoints declare the gates they may decide; managing them becomes an admin permission.

Existing endpoints get the gates they could already reach: a delivery is only ever
matched to a task whose payload carries a ``correlation_key`` value, so the gates of the
endpoint's graph whose tasks carried one (plus any gate it actually decided) are
exactly what it was used for. An endpoint with no such task yet gets no gates: it
decides nothing until an admin declares them (``PATCH /api/webhook-endpoints/{name}``).
Its service principal's graph-wide assignment is narrowed to those gates, so the
principal can decide nothing else from any surface.
"""

from django.db import migrations, models


def roles_refresh(apps, schema_editor):  # type: ignore[no-untyped-def]
    from django.apps import apps as global_apps
    from django.contrib.auth.management import create_permissions

    for label in ("runtime", "approvals"):
        create_permissions(global_apps.get_app_config(label), verbosity=0, apps=apps)
    from approvals.roles import roles_ensure

    roles_ensure(strict=False)


def gates_infer(apps, schema_editor):  # type: ignore[no-untyped-def]
    WebhookEndpoint = apps.get_model("approvals", "WebhookEndpoint")
    ApprovalTask = apps.get_model("approvals", "ApprovalTask")
    InboundDelivery = apps.get_model("approvals", "InboundDelivery")
    GraphAssignment = apps.get_model("approvals", "GraphAssignment")
    for endpoint in WebhookEndpoint.objects.all():
        # Gatehouse's gate payload always has the key; only a non-null value can be matched.
        correlated = ApprovalTask.objects.filter(graph=endpoint.graph, payload__has_key="correlation_key").exclude(
            payload__correlation_key=None
        )
        decided = InboundDelivery.objects.filter(endpoint=endpoint, decision__isnull=False, task__isnull=False)
        gates = set(correlated.values_list("node", flat=True)) | set(decided.values_list("task__node", flat=True))
        endpoint.gates = sorted(gates)
        endpoint.save(update_fields=["gates"])
        GraphAssignment.objects.filter(user_id=endpoint.principal_id).delete()
        for gate in endpoint.gates:
            GraphAssignment.objects.create(user_id=endpoint.principal_id, graph=endpoint.graph, gate=gate)


class Migration(migrations.Migration):
    dependencies = [
        ("approvals", "0006_audit_anchors_truncate_guard"),
    ]

    operations = [
        migrations.AlterModelOptions(
            name="webhookendpoint",
            options={
                "permissions": [("manage_webhooks", "Can create, rotate, scope and delete inbound webhook endpoints")]
            },
        ),
        migrations.AddField(
            model_name="webhookendpoint",
            name="gates",
            field=models.JSONField(default=list),
        ),
        migrations.RunPython(roles_refresh, migrations.RunPython.noop),
        migrations.RunPython(gates_infer, migrations.RunPython.noop),
    ]
