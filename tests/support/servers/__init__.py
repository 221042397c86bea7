"""Servers the tests stand up beside the product: sshd, PostgreSQL, TLS and raw
listeners, an echo server, a webhook, a network namespace. Imported by tests only.
"""
