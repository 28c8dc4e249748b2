"""A cron's schedule, read as LangGraph Server reads it (croniter), in its time zone (lgplatform/crons.py):
no database, no server."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from approvals.errors import InvalidInput
from lgplatform.crons import next_fire, schedule_check, timezone_check


def test_the_next_time_is_strictly_after_and_in_utc() -> None:
    at = datetime(2026, 12, 8, 9, 0, tzinfo=UTC)
    assert next_fire("0 9 * * *", "", at) == datetime(2026, 12, 9, 9, 0, tzinfo=UTC)  # 09:00 itself has fired
    assert next_fire("*/15 * * * *", "", at) == datetime(2026, 12, 8, 9, 15, tzinfo=UTC)
    assert next_fire("@hourly", "", at) == datetime(2026, 12, 8, 10, 0, tzinfo=UTC)


def test_a_schedule_is_read_in_its_time_zone_across_daylight_saving() -> None:
    """09:30 in Paris is 08:30 UTC in winter and 07:30 UTC in summer: the same cron, two UTC times."""
    winter = next_fire("30 9 * * *", "Europe/Paris", datetime(2026, 3, 27, 12, 0, tzinfo=UTC))
    summer = next_fire("30 9 * * *", "Europe/Paris", datetime(2026, 3, 29, 12, 0, tzinfo=UTC))
    assert winter == datetime(2026, 3, 28, 8, 30, tzinfo=UTC)
    assert summer == datetime(2026, 3, 30, 7, 30, tzinfo=UTC)
    # Weekdays are the zone's: Monday 00:30 in Tokyo is Sunday 15:30 UTC.
    assert next_fire("30 0 * * 1", "Asia/Tokyo", datetime(2026, 12, 6, 0, 0, tzinfo=UTC)) == datetime(
        2026, 12, 6, 15, 30, tzinfo=UTC
    )


@pytest.mark.parametrize(
    "schedule",
    ["", "every day", "0 9 * *", "0 9 * * * *", "61 * * * *", "* * * * mon-fri-sun", "@fortnightly"],
)
def test_what_is_not_five_fields_or_a_macro_is_refused_naming_the_schedule(schedule: str) -> None:
    with pytest.raises(InvalidInput) as refused:
        schedule_check(schedule)
    assert refused.value.field == "schedule"


def test_a_schedule_that_never_fires_is_refused() -> None:
    assert schedule_check(" 0 0 30 2 * ") == "0 0 30 2 *"  # five valid fields...
    with pytest.raises(InvalidInput) as refused:
        next_fire("0 0 30 2 *", "", datetime(2026, 1, 1, tzinfo=UTC))  # ...naming a day that never comes
    assert refused.value.field == "schedule"


def test_a_time_zone_is_an_iana_name() -> None:
    assert timezone_check(None) == "" and timezone_check("America/New_York") == "America/New_York"
    for name in ("Mars/Olympus_Mons", "UTC+2", "../etc/passwd"):
        with pytest.raises(InvalidInput) as refused:
            timezone_check(name)
        assert refused.value.field == "timezone"


def test_a_cron_has_no_next_run_once_its_end_time_would_pass_or_while_it_is_disabled() -> None:
    from lgplatform.crons import _next_run_date
    from lgplatform.models import Cron

    at = datetime(2026, 12, 8, 9, 0, tzinfo=UTC)
    cron = Cron(schedule="0 10 * * *", timezone="", enabled=True, end_time=datetime(2026, 12, 9, 10, 0, tzinfo=UTC))
    assert _next_run_date(cron, at) == datetime(2026, 12, 8, 10, 0, tzinfo=UTC)
    assert _next_run_date(cron, datetime(2026, 12, 8, 10, 0, tzinfo=UTC)) == cron.end_time  # its end is its last
    assert _next_run_date(cron, cron.end_time) is None  # the next would pass the end: none
    cron.enabled = False
    assert _next_run_date(cron, at) is None
