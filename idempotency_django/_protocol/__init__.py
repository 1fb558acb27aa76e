"""The protocol, framework-agnostic: the key, the fingerprint, the claim, the run, the answer.

Internal: nothing here is public (docs/api.rst lists what is). :mod:`.core` is the
orchestrator every face calls; it asks ``_storage`` once to read and once to record.
Nothing here imports a face, ``_adapters`` or ``_operations``.
"""
