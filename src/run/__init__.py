"""The harness of a run, split by phase: what happens between a command line and a fit, and after it.

cli.py (the command line: compose, check, one-line errors), config.py (the schemas and --help's text),
preflight.py (the checks that need the text and the machine; the run's parts built once), resume.py
(a checkpoint against the config), rundir.py (the run's folder, its ranks and its lock), record.py
(result.json, the run name), reruns.py (a command typed again), finish.py (how a run ends or stops).
Every other limit a value must follow is src/rules.py, used by the data and the training too.
"""
