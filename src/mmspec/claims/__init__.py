"""The reproduction scorecard: each paper's claims (config/claims/) checked on a sweep's cells."""
