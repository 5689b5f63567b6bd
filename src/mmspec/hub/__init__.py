"""The Hugging Face Hub as mmspec reads it: what names a hub repository rather than a local path
(`refs`), and the files of a repository the jobs read, in the cache (`cache`)."""
