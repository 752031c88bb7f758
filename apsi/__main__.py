"""`python -m apsi`: the apsi command."""

from apsi.cli.app import _entry

if __name__ == "__main__":
    _entry()
