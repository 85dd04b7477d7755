"""The fast tier (tests/conftest.py says what each tier folder holds)."""
