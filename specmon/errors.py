"""Errors that end a command with one line and a contract exit code (see cli.py)."""


class UsageError(Exception):
    """Bad usage or bad input (file, key or URL, and what was expected; a key the server refused
    with 401/403 during a ramp): exit code 2."""


class ServerError(Exception):
    """A server could not be reached or started, or stopped answering during a ramp and was still
    gone at its end (which, and why): exit code 3."""
