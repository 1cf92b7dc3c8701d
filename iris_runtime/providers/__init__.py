"""LLM wire protocols. Each provider turns a ProviderRequest into a stream of provider events."""
