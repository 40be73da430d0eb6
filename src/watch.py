"""`python -m src.watch [LOGDIR] [--port N] [--host H]` (`make tensorboard`): TensorBoard on the runs.

TensorBoard smooths every curve by default, so the lines it first shows are not the values the run
printed (docs/tensorboard.md); its own banner names that default address. This starts it through its
Python API (`tensorboard.program`) and prints one address instead, the one with `?smoothing=0`.
"""

from __future__ import annotations

import argparse
import sys
import threading
from pathlib import Path

from tensorboard import program

QUERY = "?smoothing=0"  # TensorBoard reads its smoothing from the address; 0: the logged values


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m src.watch", description=__doc__.split("\n\n")[0])
    parser.add_argument("logdir", nargs="?", default="outputs", type=Path, help="the runs' folder (outputs)")
    parser.add_argument("--port", type=int, default=6006, help="0: any free port")
    parser.add_argument("--host", default="localhost", help="0.0.0.0 to serve other machines")
    args = parser.parse_args(argv)
    if not args.logdir.is_dir():
        print(
            f"error: {args.logdir} is not a folder: name the runs' folder, e.g. python -m src.watch outputs",
            file=sys.stderr,
        )
        sys.exit(2)
    board = program.TensorBoard()
    board.configure(logdir=str(args.logdir), port=args.port, host=args.host)
    try:
        url = board.launch()
    except program.TensorBoardServerException as err:
        print(f"error: --port {args.port}: {err.msg}; choose another, e.g. --port 0", file=sys.stderr)
        sys.exit(2)
    print(f"TensorBoard on {args.logdir}: open {url}{QUERY} (the curves unsmoothed: the values the run printed)")
    print("Ctrl-C stops it", flush=True)
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
