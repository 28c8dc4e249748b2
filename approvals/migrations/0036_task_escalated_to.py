"""The group a deadline's escalation moved a task to, kept on the task.

The inbox badge read "escalated → <the task's group>", and a refused escalation keeps the group the
task already had: a task assigned to "reviewers" whose escalation to "leads" was refused read
"escalated → reviewers". Tasks escalated before this migration take the group from their
``deadline.escalated`` audit event (``details.escalated_to``), which has named it since escalation
began; a task whose event says none stays "not reassigned".
"""

from django.db import migrations, models


def escalated_to_backfill(apps, schema_editor):
    ApprovalTask = apps.get_model("approvals", "ApprovalTask")
    AuditEvent = apps.get_model("approvals", "AuditEvent")
    escalated = ApprovalTask.objects.filter(escalated_at__isnull=False).values_list("pk", flat=True)
    for task_id in escalated.iterator():
        event = (
            AuditEvent.objects.filter(action="deadline.escalated", subject_type="task", subject_id=str(task_id))
            .order_by("-id")
            .values_list("details", flat=True)
            .first()
        )
        group = (event or {}).get("escalated_to") if isinstance(event, dict) else None
        if isinstance(group, str) and group:
            ApprovalTask.objects.filter(pk=task_id).update(escalated_to=group[:150])


class Migration(migrations.Migration):
    dependencies = [("approvals", "0035_decision_append_only")]

    operations = [
        migrations.AddField(
            model_name="approvaltask",
            name="escalated_to",
            # A default in the database too: a process still running the code before this migration (a rolling
            # deploy) and raw inserts (bench/console_scale.py) write tasks without the column.
            field=models.CharField(blank=True, db_default="", default="", max_length=150),
        ),
        migrations.RunPython(escalated_to_backfill, migrations.RunPython.noop),
    ]
