"""Optional integrations, each a Django app of its own: add it to ``INSTALLED_APPS`` to switch it on."""
