"""GATEHOUSE_CHECKPOINTER=redis: start-up refuses, naming what is missing, against the real Redis.

langgraph-checkpoint-redis needs the RedisJSON and RediSearch modules; the suite's Redis (7.x, no
modules) has neither, and the package is not installed here — the refusal must say both, before
any run is claimed.
"""

from __future__ import annotations

import importlib.util

import pytest
import redis
from django.conf import settings

from runtime import checkpointer
from runtime.checkpointer import CheckpointerUnavailable, checkpointer_preflight
from tests.conftest import scaled


@pytest.fixture
def redis_configured(settings):
    settings.GATEHOUSE_CHECKPOINTER = "redis"
    settings.GATEHOUSE_CHECKPOINTER_REDIS_URL = settings.REDIS_URL
    return settings


def _modules() -> set[str]:
    client = redis.Redis.from_url(settings.REDIS_URL)
    try:
        return {m[b"name"].decode().lower() for m in client.module_list()}
    finally:
        client.close()


def test_start_up_refuses_a_redis_without_the_modules_naming_them(redis_configured):
    if {"rejson", "search"} <= _modules():
        pytest.skip("this Redis has RedisJSON and RediSearch")
    with pytest.raises(CheckpointerUnavailable) as caught:
        checkpointer_preflight()
    message = str(caught.value)
    assert message.startswith("GATEHOUSE_CHECKPOINTER=redis: ")
    missing = [label for name, label in checkpointer.REDIS_MODULES.items() if name not in _modules()]
    assert missing and all(label in message for label in missing)
    assert "langgraph-checkpoint-redis needs" in message
    assert "redis://127.0.0.1:6379" in message  # where it looked (without credentials)


@pytest.mark.skipif(
    importlib.util.find_spec("langgraph.checkpoint.redis") is not None, reason="langgraph-checkpoint-redis installed"
)
def test_the_refusal_also_says_the_package_is_not_installed(redis_configured):
    with pytest.raises(CheckpointerUnavailable, match=r"the package langgraph-checkpoint-redis is not installed"):
        checkpointer_preflight()


def test_the_saver_is_never_built_past_a_refusal(redis_configured, monkeypatch):
    monkeypatch.setattr(checkpointer, "_saver", None)
    with pytest.raises(CheckpointerUnavailable):
        checkpointer.checkpointer_get()
    assert checkpointer._saver is None


def test_an_unreachable_redis_is_refused_clearly(redis_configured):
    redis_configured.GATEHOUSE_CHECKPOINTER_REDIS_URL = "redis://user:secret@127.0.0.1:9/0"
    with pytest.raises(
        CheckpointerUnavailable, match=r"cannot list the modules of the Redis at redis://127.0.0.1:9/0"
    ) as caught:
        checkpointer_preflight()
    assert "secret" not in str(caught.value)


def test_the_default_checkpointers_need_no_preflight(settings):
    settings.GATEHOUSE_CHECKPOINTER = ""
    checkpointer_preflight()  # no Redis call, no error


@pytest.mark.slow
def test_a_process_starting_with_it_exits_with_the_message(tmp_path):
    import os
    import subprocess
    import sys
    from pathlib import Path

    if {"rejson", "search"} <= _modules():
        pytest.skip("this Redis has RedisJSON and RediSearch")
    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "tests.settings", "GATEHOUSE_CHECKPOINTER": "redis"}
    done = subprocess.run(
        [sys.executable, str(root / "manage.py"), "checkpoints_setup"],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=scaled(120),
    )
    assert done.returncode != 0
    assert "GATEHOUSE_CHECKPOINTER=redis" in done.stderr and "RedisJSON" in done.stderr
