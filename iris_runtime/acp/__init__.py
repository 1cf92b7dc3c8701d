"""Iris as an ACP agent on stdio (``iris acp``), for editors such as Zed and JetBrains."""
