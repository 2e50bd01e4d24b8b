"""Command-line entry points (``nightjar-ray <command>``)."""
