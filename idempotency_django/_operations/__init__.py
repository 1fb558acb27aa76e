"""Running it: the system checks (settings, deployment) and the log's receivers.

Internal: the checks' ids and messages are the contract (docs/settings.rst, docs/operations.rst), not these modules.
"""
