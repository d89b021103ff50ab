"""``python -m symbolic`` runs the command line."""

from .cli import run

run()
