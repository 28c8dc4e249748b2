"""A /lg/ run keeps its metadata, as LangGraph Server does: the run object reported only Gatehouse's own keys
and the graph never saw what the client sent. Nullable, no default: adding it rewrites no row."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("runtime", "0016_run_config_error_type")]

    operations = [
        migrations.AddField(
            model_name="run",
            name="metadata",
            field=models.JSONField(blank=True, null=True),
        ),
    ]
