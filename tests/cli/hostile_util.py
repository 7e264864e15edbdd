"""Helpers of the hostile-input suites: run the CLI in-process, and list what a folder holds."""
import os

from mactile.cli.main import main


def snapshot(folder):
    """Every entry under ``folder`` with its type, size, mode and modification time (a
    folder's time left out: the output checks probe a folder by creating and removing a
    file in it)."""
    out = {}
    for root, dirs, files in os.walk(folder):
        for n in dirs + files:
            p = os.path.join(root, n)
            st = os.lstat(p)
            out[os.path.relpath(p, folder)] = (st.st_mode, st.st_size,
                                               None if n in dirs else st.st_mtime_ns)
    return out


def run(argv, capsys):
    """``mactile argv`` in-process: ``(exit status, stdout, stderr)``."""
    try:
        rc = main(argv)
    except SystemExit as e:  # argparse usage errors
        rc = e.code
    cap = capsys.readouterr()
    return rc, cap.out, cap.err
