"""The slow tier: end-to-end runs of several seconds each (tests/conftest.py)."""
