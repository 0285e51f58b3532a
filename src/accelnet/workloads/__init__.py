"""Real workloads for ``accelnet demo``: plain, deterministic functions a worker can run.

Each workload takes JSON-serialisable keyword arguments, writes its files under the
``out_dir`` it is given (creating it), and returns a JSON-serialisable summary ``dict``
whose file entries are names relative to ``out_dir``. None reads the environment, keeps
global state or spawns processes; scheduling them is the caller's business.

- :mod:`accelnet.workloads.inference` -- ``serve_digits``: train a classifier on
  scikit-learn's bundled digits, then serve batched predictions and time them.
- :mod:`accelnet.workloads.render` -- ``render_tile`` / ``assemble``: a numpy ray tracer,
  one horizontal band per worker, stitched into ``render.png``.
- :mod:`accelnet.workloads.data` -- ``aggregate_partition`` / ``merge``: a synthetic
  table aggregated per partition with polars, merged into ``result.parquet``.
- :mod:`accelnet.workloads.video` -- ``detect_motion``: motion detection on a synthetic
  video stream, frame by frame, with per-frame latency and an annotated ``motion.gif``.
- :mod:`accelnet.workloads.ddp_digits` -- the exception: a plain PyTorch DDP training
  script (``python -m accelnet.workloads.ddp_digits``, or under ``torchrun``), run as a
  command, one process per rank; it reads torchrun's variables and checkpoints to
  ``$ACCELNET_CHECKPOINT_DIR`` (needs the ``torch`` extra). The demo's training job.

The modules import numpy, scikit-learn, scipy, polars and Pillow themselves; importing
this package imports none of them.
"""
