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
            # A default in the database too, for a process still running the code before this migration.
            field=models.JSONField(blank=True, db_default=models.Value([], output_field=models.JSONField()), default=list),
        ),
    ]
