"""specmon: watch SGLang servers serve, drive a concurrency ramp, find the knee."""

__version__ = "0.1.0"
