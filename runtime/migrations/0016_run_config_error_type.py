"""A run keeps the config keys its graph runs with (``tags``, ``run_name``) and, when it fails, its
exception's class name: the /lg/ API read both back out of nothing (ignored) or out of the error's text."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("runtime", "0015_run_dispatch_stamps_exact")]

    operations = [
        migrations.AddField(
            model_name="run",
            name="config",
            field=models.JSONField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="run",
            name="error_type",
            field=models.CharField(blank=True, max_length=200, null=True),
        ),
    ]
