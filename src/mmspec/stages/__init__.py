"""The workflow's stages: one module each, run by a Snakemake rule and by `mmspec <stage>`.

A module of this package is a stage when it declares, at its top level:

    HELP = "decode one cell"          # the command line's one-line help
    GPU = True                        # optional: runs models on a GPU when there is one
    WARM = True                       # optional: its jobs may run in a warm worker
    READS_ALL_COMPONENTS = True       # optional: reads every component's declaration (plugins')
    def add_arguments(parser): ...    # its command line
    def main(args): ...               # runs it from parsed arguments

`mmspec.commands` reads these declarations from the modules' source (the command line, the code
fingerprints, the GPU and warm-worker policies and the plan's device stages all follow from
them; nothing lists the stages by hand).
"""
