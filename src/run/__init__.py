"""The harness of a run, split by phase: what happens between a command line and a fit.

cli.py (the command line: compose, one-line errors), config.py (the schemas, --help's text and the value
checks), preflight.py (the checks that need the text and the machine; the run's parts built once),
resume.py (a checkpoint against the config), rundir.py (the run's folder under torchrun/SLURM, its
ranks and its lock), record.py (result.json, the run name, the exit status). rules.py is every
other limit a value must follow, used by the data, the training and the commands too.

This file imports nothing, so `src.run.rules` sits low in the layers and the rest high.
"""
