"""Indexes for the console at scale (100k pending tasks, 1M audit events): pages walk an index, never sort."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("approvals", "0004_webhooks"),
    ]

    operations = [
        migrations.AddIndex(
            model_name="approvaltask",
            index=models.Index(fields=["status", "-created_at", "-id"], name="task_status_newest"),
        ),
        migrations.AddIndex(
            model_name="approvaltask",
            index=models.Index(fields=["status", "due_at", "id"], name="task_status_due"),
        ),
        migrations.AddIndex(
            model_name="auditevent",
            index=models.Index(fields=["action", "-id"], name="audit_action_newest"),
        ),
        migrations.AddIndex(
            model_name="auditevent",
            index=models.Index(fields=["graph", "-id"], name="audit_graph_newest"),
        ),
    ]
