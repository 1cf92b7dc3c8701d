"""The headless bridge: the transport behind the internal API and sub-agent requests."""
