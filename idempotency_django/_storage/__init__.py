"""Storage and its security: the claim's SQL per database (``store/``), the replay cache,
sealing, the secrets behind it and the stored results' serialisation.

Internal: nothing here is public. The seal is opened and made here only; nothing here
imports a face, ``_adapters``, ``_operations`` or the protocol's orchestrator.
"""
