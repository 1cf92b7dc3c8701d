"""The internal API's blueprints (health, sessions, channels)."""
