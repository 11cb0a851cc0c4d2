#!/usr/bin/env python3
"""tb_histograms.py RUNDIR: dtrain's TensorBoard histograms, as TensorBoard reads them.

Reads the event files of one run (e.g. LOGDIR/train) twice, with the two
readers TensorBoard has:
- event_accumulator.EventAccumulator: the HistogramProto itself (Histograms());
- plugin_event_accumulator.EventAccumulator, the one behind TensorBoard's
  data provider: each histogram migrated (data_compat) to the [k, 3] tensor
  of (left, right, count) rows that the Histograms and Distributions tabs
  draw, and compressed as the Distributions tab does;
and prints one line per (tag, step), sorted:

    HISTO tag=<tag> step=<step> num=<num> min=<repr> max=<repr> sum=<repr>
          counts=<sum of bucket counts> buckets=<k> rows=<migrated rows>
          rowcounts=<sum of the migrated counts>

(one line each). Fails (exit 2) when the two readers disagree on the tags or
steps, a migrated tensor is not [k, 3], or a record is bad. Run it with the
venv of setup-tensorboard.sh. Exit 3: tensorboard does not import.
"""
import sys


def main(argv):
    if len(argv) != 2:
        print("usage: tb_histograms.py RUNDIR", file=sys.stderr)
        return 1
    try:
        from tensorboard.backend.event_processing import event_accumulator as ea
        from tensorboard.backend.event_processing import plugin_event_accumulator as pea
        from tensorboard.plugins.distribution import compressor
        from tensorboard.util import tensor_util
    except ImportError as e:
        print("tb_histograms: cannot import tensorboard: %s" % e, file=sys.stderr)
        return 3
    acc = ea.EventAccumulator(argv[1], size_guidance={k: 0 for k in ea.DEFAULT_SIZE_GUIDANCE})
    acc.Reload()
    plug = pea.EventAccumulator(argv[1], size_guidance={k: 0 for k in pea.DEFAULT_SIZE_GUIDANCE})
    plug.Reload()
    tags = sorted(acc.Tags()["histograms"])
    ptags = sorted(plug.PluginTagToContent("histograms").keys())
    if tags != ptags:
        print("tb_histograms: the readers disagree on the tags: %s / %s" % (tags, ptags), file=sys.stderr)
        return 2
    lines = []
    for tag in tags:
        migrated = {t.step: tensor_util.make_ndarray(t.tensor_proto) for t in plug.Tensors(tag)}
        for ev in acc.Histograms(tag):
            h = ev.histogram_value
            arr = migrated.get(ev.step)
            if arr is None or arr.ndim != 2 or arr.shape[1] != 3:
                print("tb_histograms: %s step %d: no [k, 3] tensor from the data provider" % (tag, ev.step),
                      file=sys.stderr)
                return 2
            compressor.compress_histogram(arr)  # the Distributions tab's view: must not fail
            lines.append("HISTO tag=%s step=%d num=%d min=%r max=%r sum=%r counts=%d buckets=%d rows=%d rowcounts=%d"
                         % (tag, ev.step, h.num, h.min, h.max, h.sum, sum(h.bucket), len(h.bucket), arr.shape[0],
                            round(float(arr[:, 2].sum()))))
    for line in sorted(lines):
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
