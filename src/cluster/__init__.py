"""The cluster wing: what a run needs only when one machine is not enough.

meeting.py (torchrun's ranks meet through torchrun's store before they train; ranks that could never
meet are refused), slurm.py (a pre-empted SLURM job requeued and resumed), ranks.py (a DDP rank whose
peer died ends in one line). The core imports none of these at module level: each is loaded where a
launcher's variables say it is needed.
"""
