"""The real-SGLang tier: tests against a real SGLang server on the CPU (tests/conftest.py)."""
