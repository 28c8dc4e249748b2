import pytest

from runtime.state import thread_state_read
from tests.console.conftest import task_make

pytestmark = pytest.mark.django_db


def test_read_state():
    task = task_make()
    assert thread_state_read(task.thread) is None
