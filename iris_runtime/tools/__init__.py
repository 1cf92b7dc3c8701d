"""Built-in tools (bash, read, write, edit, attach) and the host sandbox, shipped as a plugin."""
