"""The console's one time format (settings.FORMAT_MODULE_PATH): 24-hour with seconds, UTC,
as `2026-12-05 07:04:12 UTC`, on every admin page, the dashboard and the mirror's lists.

Django reads `en/formats.py` for every English locale instead of its own (`N j, Y, P`, 12-hour
without seconds). Holds constants only.
Tests: tests/console/test_console_admin.py::test_times_read_24_hour_with_seconds_in_utc.
"""
