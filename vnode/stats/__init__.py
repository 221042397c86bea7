"""Usage and resource metrics: what `kubectl top` and the metrics listener read.
Tests: tests/vnode/test_stats_summary.py
"""
