"""An example of a researcher's own mmspec task metric (see README.md)."""

mmspec_api = 2  # the mmspec plugin API it is written for (mmspec.api.API_VERSION)
