"""The rigs of each area's end-to-end tests: clusters, clouds, managers and nodes wired
together the way a test of that area needs them. Imported by tests only.
"""
