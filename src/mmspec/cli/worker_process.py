"""`python -m mmspec.cli.worker_process FD STEM PATH`: a warm worker's process
(`mmspec.workflow.worker` starts it), serving its slot's jobs, each run as the command line runs
it."""

import sys
from pathlib import Path

from mmspec.cli import main
from mmspec.stages import generate  # noqa: F401 (the imports a job would pay for, paid once)
from mmspec.workflow import worker
from mmspec.workflow.private_folder import adopt

if __name__ == "__main__":
    # the client's descriptor, checked again: this process trusts no folder it has not checked
    worker.serve(adopt(int(sys.argv[1]), Path(sys.argv[3])), sys.argv[2], main)
