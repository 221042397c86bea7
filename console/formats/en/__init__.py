"""The English formats module Django looks up under FORMAT_MODULE_PATH (see the package's docstring).
Tests: tests/console/test_console_admin.py::test_times_read_24_hour_with_seconds_in_utc.
"""
