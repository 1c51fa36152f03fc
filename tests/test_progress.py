"""Progress that tells the truth: a "compiling…" line before the long first call, bars only on a
terminal (auto; --progress/--no-progress force), the bar closed before the summary prints and
counting the same steps as the summary. The command line runs under a pseudo-terminal (pty) and
under pipes, as a person and a log file see it."""

import fcntl
import io
import os
import pty
import re
import struct
import subprocess
import sys
import termios

from ibflow import _progress

FLOW = [sys.executable, "-c", "import sys; from ibflow._cli import main; sys.exit(main())",
        "flow", "--n", "10", "--d", "40", "--k", "3", "--scale", "1e-5", "--method",
        "parameters"]
ENV = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}


def _on_terminal(cmd) -> tuple[int, str]:
    """Run `cmd` with stdout and stderr on one pty of 120 columns; returns its exit code and
    everything written, in order."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
    proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=slave, stderr=slave, env=ENV)
    os.close(slave)
    chunks = []
    while True:
        try:
            data = os.read(master, 65536)
        except OSError:  # EIO: the child closed the terminal
            break
        if not data:
            break
        chunks.append(data)
    os.close(master)
    return proc.wait(timeout=300), b"".join(chunks).decode().replace("\r\n", "\n")


def test_terminal_bar_is_closed_before_the_summary_and_counts_its_steps():
    code, text = _on_terminal(FLOW)
    assert code == 0, text
    summary = text.index("problem ")
    bar, after = text[:summary], text[summary:]
    # The compile is announced before the bar opens, the bar ends its line before the summary
    # starts and is never redrawn after it.
    assert "ibflow: compiling the flow" in bar
    assert bar.index("ibflow: compiling") < bar.index("flow: loss")
    assert bar.endswith("\n") and "flow: loss" not in after and "\r" not in after
    last_frame = bar.rstrip("\n").split("\r")[-1]
    assert "100%" in last_frame
    shown = int(re.search(r"(\d+) steps\]", last_frame).group(1))
    reported = int(re.search(r"^steps\s+(\d+)$", after, re.MULTILINE).group(1))
    assert shown == reported > 16  # the steps the summary counts (it said "104 evaluations")


def test_piped_output_has_no_bar_and_no_carriage_returns():
    proc = subprocess.run(FLOW, capture_output=True, text=True, env=ENV, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""  # no bar, no compiling line: a log holds results
    assert "\r" not in proc.stdout and proc.stdout.startswith("problem ")


class _Stream(io.StringIO):
    def __init__(self, tty):
        super().__init__()
        self._tty = tty

    def isatty(self):
        return self._tty


def test_bars_follow_the_stream_unless_forced(monkeypatch):
    assert _progress.resolve(None, _Stream(True)) and not _progress.resolve(None, _Stream(False))
    assert _progress.resolve(True, _Stream(False)) and not _progress.resolve(False, _Stream(True))
    monkeypatch.setattr(sys, "stderr", _Stream(False))
    bar = _progress.bar(3, desc="sweep: exact", unit="chunk")
    bar.update(1)
    bar.close()
    assert sys.stderr.getvalue() == ""  # piped: no bar
    bar = _progress.bar(3, desc="sweep: exact", unit="chunk", progress=True)
    bar.update(3)
    bar.close()
    assert "sweep: exact" in sys.stderr.getvalue() and "3/3" in sys.stderr.getvalue()


def test_progress_lines_only_where_asked(capsys):
    """A long reproduction's progress lines (`_progress.lines`) reach stderr where progress is
    on (``--progress``, or a terminal) and nowhere otherwise."""
    from ibflow._progress import lines

    lines(False)("  width 64: 6 of 6 flows converged")
    assert capsys.readouterr() == ("", "")
    lines(True)("  width 64: 6 of 6 flows converged")
    assert capsys.readouterr() == ("", "  width 64: 6 of 6 flows converged\n")
