"""Django's format names for English locales, overridden with the console's one time format.
Tests: tests/console/test_console_admin.py::test_times_read_24_hour_with_seconds_in_utc.
"""

DATETIME_FORMAT = "Y-m-d H:i:s T"  # T: the zone's abbreviation, "UTC" (settings.TIME_ZONE)
SHORT_DATETIME_FORMAT = DATETIME_FORMAT
DATE_FORMAT = "Y-m-d"
SHORT_DATE_FORMAT = DATE_FORMAT
TIME_FORMAT = "H:i:s"
