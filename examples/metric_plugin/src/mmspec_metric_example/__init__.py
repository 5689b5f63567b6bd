"""An example of a researcher's own mmspec task metric (see README.md)."""
