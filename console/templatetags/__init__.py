"""The console's template filters (`{% load cells %}`), for the dashboard's templates.
Tests: tests/console/test_console_layout.py::test_every_page_fits_1280_pixels_without_mid_word_wraps.
"""
