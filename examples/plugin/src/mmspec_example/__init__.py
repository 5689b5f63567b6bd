"""An example of a researcher's own mmspec components (see README.md)."""
