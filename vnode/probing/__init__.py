"""Probes: the checks (exec, httpGet, tcpSocket, grpc) and the loop that runs them.
Tests: tests/vnode/test_probes.py
"""
