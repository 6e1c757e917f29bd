"""Execute a notebook headless (nbclient) and write it back with its outputs.

    python tools/run_notebook.py                                  # examples/quickstart.ipynb, in place
    python tools/run_notebook.py --output /tmp/quickstart.ipynb   # keep the source clean
    QUICKSTART_SKIP_BUILD=1 python tools/run_notebook.py          # extension already built

Runs every cell in order from the repository root with the given Jupyter kernel (default
python3; needs nbclient, nbformat and ipykernel: `pip install nbclient nbformat ipykernel`).
The executed notebook is written even when a cell fails, so its traceback can be read there.
Exit status: 0 all cells ran, 1 a cell raised, 2 nbclient/nbformat are not installed.
"""
import argparse
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DEFAULT_NOTEBOOK = REPO / "examples" / "quickstart.ipynb"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("notebook", nargs="?", type=Path, default=DEFAULT_NOTEBOOK,
                        help=f"notebook to run (default: {DEFAULT_NOTEBOOK.relative_to(REPO)})")
    parser.add_argument("--output", type=Path, default=None,
                        help="where to write the executed notebook (default: over the input)")
    parser.add_argument("--timeout", type=int, default=900,
                        help="seconds one cell may run (default: 900; the build cell is slowest)")
    parser.add_argument("--kernel", default="python3", help="Jupyter kernel name (python3)")
    args = parser.parse_args()
    try:
        import nbformat
        from nbclient import NotebookClient
        from nbclient.exceptions import CellExecutionError
    except ImportError as error:
        print(f"error: {error}; install with `pip install nbclient nbformat ipykernel`",
              file=sys.stderr)
        return 2

    notebook = nbformat.read(args.notebook, as_version=4)
    client = NotebookClient(notebook, timeout=args.timeout, kernel_name=args.kernel,
                            resources={"metadata": {"path": str(REPO)}})
    output = args.output or args.notebook
    status = 0
    try:
        client.execute()
    except CellExecutionError as error:
        print(f"error: a cell raised:\n{error}", file=sys.stderr)
        status = 1
    finally:
        nbformat.write(notebook, output)
    print(f"{'executed' if status == 0 else 'FAILED, partly executed'}: {args.notebook} -> "
          f"{output}")
    return status


if __name__ == "__main__":
    sys.exit(main())
