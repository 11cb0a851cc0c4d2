#!/usr/bin/env python3
"""tb_read.py LOGDIR: read dtrain's TensorBoard event files with TensorBoard.

Loads every run under LOGDIR (each directory that holds event files: train/,
validation/, or LOGDIR itself, named "." then) with TensorBoard's own reader,
tensorboard.backend.event_processing.event_accumulator.EventAccumulator, keeping
every event (size guidance 0), and prints one line per (run, tag, step), sorted:

    SCALAR run=<run> tag=<tag> step=<step> value=<value, %.6g>

Run it with the venv of setup-tensorboard.sh (VENV/bin/python tb_read.py ...).

The reader checks both CRCs of every record, but on a bad or truncated record
it only logs at debug level and stops reading that file; this script listens
for that message and fails instead, so a file TensorBoard would show only in
part is an error here. It also requires the file_version Event.

Exit status: 0 read; 1 usage; 2 LOGDIR cannot be read (missing, no event
files, a bad record, no file_version); 3 tensorboard does not import.
"""
import logging
import os
import sys


def die(code, msg):
    print("tb_read: error: " + msg, file=sys.stderr)
    sys.exit(code)


class _DataLoss(logging.Handler):
    """Collects the reader's "Truncated record" messages (CRC or length)."""

    def __init__(self):
        super().__init__(logging.DEBUG)
        self.seen = []

    def emit(self, record):
        msg = record.getMessage()
        if "Truncated record" in msg or "crc32" in msg:
            self.seen.append(msg)


def runs(logdir, is_events_file):
    """(run name, directory) for each directory under logdir with event files."""
    found = []
    for d, _, files in os.walk(logdir):
        if any(is_events_file(os.path.join(d, f)) for f in files):
            rel = os.path.relpath(d, logdir)
            found.append((rel, d))
    return sorted(found)


def main(argv):
    if len(argv) != 2 or argv[1].startswith("-"):
        print("usage: tb_read.py LOGDIR", file=sys.stderr)
        return 1
    logdir = argv[1]
    try:
        from tensorboard.backend.event_processing import event_accumulator as ea
        from tensorboard.backend.event_processing import io_wrapper
    except ImportError as e:
        die(3, "cannot import tensorboard (%s); make the venv with tests/interop/setup-tensorboard.sh" % e)
    if not os.path.isdir(logdir):
        die(2, "%s: not a directory" % logdir)

    loss = _DataLoss()
    tb_log = logging.getLogger("tensorboard")
    tb_log.addHandler(loss)
    tb_log.setLevel(logging.DEBUG)
    tb_log.propagate = False   # keep its debug chatter off stderr

    found = runs(logdir, io_wrapper.IsTensorFlowEventsFile)
    if not found:
        die(2, "%s: no event files (events.out.tfevents.*) in it or below it" % logdir)
    every = {k: 0 for k in ea.DEFAULT_SIZE_GUIDANCE}   # 0: keep all events
    lines = []
    for run, path in found:
        acc = ea.EventAccumulator(path, size_guidance=every)
        try:
            acc.Reload()
        except Exception as e:   # a record whose Event does not parse
            die(2, "%s: %s: %s" % (path, type(e).__name__, e))
        if loss.seen:
            die(2, "%s: %s" % (path, "; ".join(loss.seen)))
        if acc.file_version is None:
            die(2, "%s: no Event with file_version (\"brain.Event:2\")" % path)
        for tag in acc.Tags()["scalars"]:
            for ev in acc.Scalars(tag):
                lines.append((run, tag, ev.step, ev.value))
    for run, tag, step, value in sorted(lines):
        print("SCALAR run=%s tag=%s step=%d value=%.6g" % (run, tag, step, value))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
