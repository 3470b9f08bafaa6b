from perflib.cli import entry

entry()
