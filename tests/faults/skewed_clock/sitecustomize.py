"""Loaded by a worker started with this directory on PYTHONPATH: its clock is off by
GATEHOUSE_TEST_CLOCK_SKEW seconds (positive: ahead), as a machine whose NTP broke.

libfaketime is not installed; a process-wide patch of ``time.time`` (Celery,
kombu, beat) and of ``django.utils.timezone.now`` (everything Gatehouse and
Django date) gives that process alone a skewed clock. The database's clock is
untouched.
"""

import os
import time
from datetime import timedelta

_skew = float(os.environ.get("GATEHOUSE_TEST_CLOCK_SKEW") or 0)

if _skew:
    _real_time = time.time
    time.time = lambda: _real_time() + _skew

    from django.utils import timezone

    _real_now = timezone.now
    timezone.now = lambda: _real_now() + timedelta(seconds=_skew)
