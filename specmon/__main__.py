from specmon.cli import entry

entry()
