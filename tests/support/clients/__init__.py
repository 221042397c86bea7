"""Clients the tests drive the product with: plain HTTPS, SPDY, kubectl, a
terminal, the console's login, a Prometheus scrape. Imported by tests only.
"""
