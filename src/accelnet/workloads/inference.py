"""Inference serving: a digits classifier answering a stream of batched requests.

``serve_digits`` trains a small neural network (scikit-learn's ``MLPClassifier``, one
hidden layer of 128 ReLU units) on scikit-learn's bundled 8x8 ``load_digits`` images
(shipped with the package: nothing is downloaded), with a seeded, stratified train/test
split, then serves a seeded stream of requests drawn from the test set in fixed-size
batches, timing every batch as a server would. Predictions are deterministic for a seed;
only the timings vary from run to run.
"""

from __future__ import annotations

import csv
import time
from pathlib import Path

import numpy as np
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split
from sklearn.neural_network import MLPClassifier
from threadpoolctl import threadpool_limits  # a required dependency of scikit-learn

from accelnet.workloads._common import Summary, check_positive, prepare_out_dir, write_json

TEST_FRACTION = 0.25
PIXEL_MAX = 16.0  # load_digits pixels are counts 0..16
HIDDEN_UNITS = 128


def serve_digits(
    out_dir: str,
    device: str = "cpu",
    batch_size: int = 64,
    requests: int = 2000,
    seed: int = 0,
) -> Summary:
    """Train a digits classifier, serve ``requests`` predictions in batches, and time them.

    The model is trained on 75% of the 1,797 digits (split and initial weights seeded by
    ``seed``); the request stream draws ``requests`` test images with replacement (seeded),
    served in batches of ``batch_size`` (the last one may be smaller). One untimed warm-up
    batch runs first. Latency is the wall time of one batch's ``predict_proba`` and argmax,
    measured with ``time.perf_counter``; throughput is ``requests`` over the summed batch
    times. Native thread pools (BLAS, OpenMP) are limited to one thread for the call and
    restored on return, so workers sharing a machine's cores do not oversubscribe them.

    Writes under ``out_dir`` (created if missing; files are overwritten):

    - ``predictions.csv``: one row per request (``request, batch, test_index, label,
      predicted, confidence``);
    - ``report.json``: the returned summary plus every batch's latency in ms.

    Returns a JSON-serialisable summary: ``accuracy`` (whole test set), ``stream_accuracy``
    (the served requests), ``throughput_per_s``, ``latency_ms`` (``p50``, ``p99``, ``mean``,
    ``max``), sizes, ``train_s``, ``device`` and ``files`` (names relative to ``out_dir``).
    The work runs on the CPU whatever ``device`` says; it is recorded, not interpreted.
    Raises ``ValueError`` if ``batch_size`` or ``requests`` is below 1. Does not block on
    anything but the CPU.
    """
    check_positive(batch_size=batch_size, requests=requests)
    out = prepare_out_dir(out_dir)

    # Small matrices: one BLAS thread is as fast, and several workers sharing a few cores
    # do not oversubscribe them (multi-threaded OpenBLAS slows down 3-20x under contention).
    with threadpool_limits(limits=1):
        return _serve(out, device, batch_size, requests, seed)


def _serve(out: Path, device: str, batch_size: int, requests: int, seed: int) -> Summary:
    digits = load_digits()
    x = np.asarray(digits.data, dtype=np.float64) / PIXEL_MAX
    y = np.asarray(digits.target, dtype=np.int64)
    x_train, x_test, y_train, y_test = train_test_split(
        x, y, test_size=TEST_FRACTION, random_state=seed, stratify=y
    )

    started = time.perf_counter()
    # tol=1e-3 converges in ~100 epochs (well before max_iter), so no ConvergenceWarning
    model = MLPClassifier(
        hidden_layer_sizes=(HIDDEN_UNITS,), max_iter=500, tol=1e-3, random_state=seed
    )
    model.fit(x_train, y_train)
    train_s = time.perf_counter() - started
    accuracy = float(np.mean(model.predict(x_test) == y_test))

    rng = np.random.default_rng(seed)
    stream = rng.integers(0, len(x_test), size=requests)
    model.predict_proba(x_test[stream[:batch_size]])  # warm-up, untimed

    predicted = np.empty(requests, dtype=np.int64)
    confidence = np.empty(requests, dtype=np.float64)
    latencies_ms: list[float] = []
    for start in range(0, requests, batch_size):
        batch = x_test[stream[start : start + batch_size]]
        t0 = time.perf_counter()
        proba = model.predict_proba(batch)
        best = np.argmax(proba, axis=1)
        latencies_ms.append((time.perf_counter() - t0) * 1000.0)
        predicted[start : start + len(batch)] = model.classes_[best]
        confidence[start : start + len(batch)] = proba[np.arange(len(batch)), best]

    labels = y_test[stream]
    with (out / "predictions.csv").open("w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(["request", "batch", "test_index", "label", "predicted", "confidence"])
        for i in range(requests):
            writer.writerow(
                [
                    i,
                    i // batch_size,
                    int(stream[i]),
                    int(labels[i]),
                    int(predicted[i]),
                    f"{confidence[i]:.6f}",
                ]
            )

    lat = np.asarray(latencies_ms)
    serve_s = float(lat.sum()) / 1000.0
    summary: Summary = {
        "workload": "serve_digits",
        "device": device,
        "model": f"MLPClassifier({HIDDEN_UNITS} hidden units)",
        "train_epochs": int(model.n_iter_),
        "seed": seed,
        "train_samples": len(x_train),
        "test_samples": len(x_test),
        "train_s": round(train_s, 6),
        "accuracy": accuracy,
        "requests": requests,
        "batch_size": batch_size,
        "batches": len(latencies_ms),
        "stream_accuracy": float(np.mean(predicted == labels)),
        "serve_s": round(serve_s, 6),
        "throughput_per_s": requests / max(serve_s, 1e-9),
        "latency_ms": {
            "p50": float(np.percentile(lat, 50)),
            "p99": float(np.percentile(lat, 99)),
            "mean": float(lat.mean()),
            "max": float(lat.max()),
        },
        "files": {"predictions": "predictions.csv", "report": "report.json"},
    }
    write_json(out / "report.json", {**summary, "batch_latency_ms": latencies_ms})
    return summary
