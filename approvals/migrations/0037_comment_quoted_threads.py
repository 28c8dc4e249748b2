"""Comment versions name the other threads whose redacted values they quote.

A comment was masked by its own thread's redacted values only: an admin who quoted another
applicant's date of birth in a comment showed it to every reviewer of this thread, on every
surface. Versions written before this migration quote no other thread (an empty list).
"""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("approvals", "0036_task_escalated_to")]

    operations = [
        migrations.AddField(
            model_name="commentversion",
            name="quoted_threads",
            field=models.JSONField(blank=True, default=list),
        ),
    ]
