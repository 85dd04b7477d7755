"""Errors that end a command with one line and a contract exit code (see cli.py)."""


class UsageError(Exception):
    """Bad usage or bad input (file, key or URL, and what was expected): exit code 2."""


class ServerError(Exception):
    """A server could not be reached or started (which, and why): exit code 3."""
