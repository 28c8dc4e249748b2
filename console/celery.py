"""The Celery application. Configuration comes from Django settings (CELERY_*)."""

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "console.settings")

app = Celery("gatehouse")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks(["runtime", "approvals"])


@app.on_after_finalize.connect
def _ready_probe(sender: Celery, **kwargs: object) -> None:
    from celery.signals import worker_ready, worker_shutdown

    def write_ready(**_: object) -> None:
        # A file-based readiness probe for process supervisors and tests.
        path = os.environ.get("GATEHOUSE_READY_FILE")
        if path:
            with open(path, "w") as fh:
                fh.write(str(os.getpid()))

    def remove_ready(**_: object) -> None:
        path = os.environ.get("GATEHOUSE_READY_FILE")
        if path and os.path.exists(path):
            os.unlink(path)

    worker_ready.connect(write_ready, weak=False)
    worker_shutdown.connect(remove_ready, weak=False)
