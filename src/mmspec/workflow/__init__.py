"""What the workflow's rules call: code fingerprints (`fingerprint`), the per-cell stages' batches
(`batches`), a workstation's GPUs (`gpus`), warm workers (`worker`) and the private folder they
share (`private_folder`)."""
