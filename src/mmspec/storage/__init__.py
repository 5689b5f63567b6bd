"""What the stages write: the Parquet contract of each table (`tables`), durable atomic writes
(`durable`), and whether an output is whole (`integrity`)."""
