"""The built-in task metrics, one module each; the metric catalog imports every module here."""
