"""The digits classifier as an HTTP service: ``python -m accelnet.workloads.digits_service``.

Serves on ``$ACCELNET_BIND:$PORT`` (accelnet gives a service's replicas ``ACCELNET_PORT``
and ``PORT``, and on Ray their node's address as ``ACCELNET_BIND``; 127.0.0.1 without it;
``--port`` overrides): ``GET /healthz`` (ready once the model is trained),
``POST /predict`` with ``{"pixels": [64 numbers 0..16]}`` or ``GET /predict?index=k`` (the
k-th held-out digit) answers ``{"digit": d, "device", "model", "version", "classifier"}``
(``version``: ``$SERVICE_VERSION``, default 1), ``GET /pid``.
The model is scikit-learn's logistic regression on its bundled 8x8 digits (trained at start,
well under a second), or with ``--model torch`` a small torch MLP (needs ``.[torch]``). On
an emulated device (``ACCELNET_EMULATED=1``) each request also holds the device for
``--base-ms`` scaled by the device model's speed (the catalog's FP16 peak against 100
TFLOP/s, at most 1 s), one request at a time, as a real accelerator would serialise them:
an emulated H100 answers faster than an L4, a T4 slower. A CPU core (emulated or not)
computes for real and holds nothing more, unless ``--hold-ms`` asks for a fixed hold per
request (one request at a time) on any device.
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

from accelnet.workloads._common import serve_app, service_args

REFERENCE_TFLOPS = 100.0
MAX_HOLD_S = 1.0  # no emulated request holds its device longer


def service_seconds(base_ms: float, model_name: str | None) -> float:
    """Seconds one request holds an emulated device of ``model_name``."""
    from accelnet.fabric.catalog import find_device_model  # noqa: PLC0415
    from accelnet.fabric.model import DeviceKind  # noqa: PLC0415
    from accelnet.serve.autoscale import catalog_speed  # noqa: PLC0415

    m = find_device_model(model_name) if model_name else None
    if m is None:
        return base_ms / 1e3
    if m.kind is DeviceKind.CPU:
        return 0.0  # a CPU core computes for real: nothing to emulate
    tflops = catalog_speed(m) or REFERENCE_TFLOPS
    return min(MAX_HOLD_S, base_ms / 1e3 * REFERENCE_TFLOPS / tflops)


def torch_classifier(x_train: Any, y_train: Any, seed: int = 0) -> Any:
    """A small torch MLP (64-128-10) trained on the digits (full batch, Adam, about a
    second on a CPU), on CUDA when the replica was given a GPU; a ``predict(rows)``
    function as scikit-learn's."""
    import numpy as np  # noqa: PLC0415
    import torch  # noqa: PLC0415

    torch.manual_seed(seed)
    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    net = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(),
                              torch.nn.Linear(128, 10)).to(dev)  # fmt: skip
    x = torch.tensor(x_train / 16.0, dtype=torch.float32, device=dev)
    y = torch.tensor(y_train, dtype=torch.long, device=dev)
    opt = torch.optim.Adam(net.parameters(), lr=0.01)
    for _ in range(200):
        opt.zero_grad()
        torch.nn.functional.cross_entropy(net(x), y).backward()
        opt.step()
    net.eval()

    def predict(rows: Any) -> Any:
        with torch.no_grad():
            t = torch.tensor(np.asarray(rows) / 16.0, dtype=torch.float32, device=dev)
            return net(t).argmax(dim=1).cpu().numpy()

    return predict


def make_app(base_ms: float, hold_ms: float = 0.0, model: str = "logreg") -> Any:
    """The Starlette app (trains the model first: ``logreg``, scikit-learn's logistic
    regression, or ``torch``, :func:`torch_classifier`); ``hold_ms``: a fixed extra hold per
    request on any device (a heavier model's time), one request at a time."""
    import numpy as np  # noqa: PLC0415
    from sklearn.datasets import load_digits  # noqa: PLC0415
    from sklearn.linear_model import LogisticRegression  # noqa: PLC0415
    from sklearn.model_selection import train_test_split  # noqa: PLC0415
    from starlette.applications import Starlette  # noqa: PLC0415
    from starlette.requests import Request  # noqa: PLC0415
    from starlette.responses import JSONResponse, PlainTextResponse  # noqa: PLC0415
    from starlette.routing import Route  # noqa: PLC0415

    x, y = load_digits(return_X_y=True)
    x_train, x_test, y_train, _ = train_test_split(x, y, test_size=0.25, random_state=0,
                                                   stratify=y)  # fmt: skip
    if model == "torch":
        classify = torch_classifier(x_train, y_train)
    else:
        classify = LogisticRegression(max_iter=300).fit(x_train, y_train).predict
    device = os.environ.get("ACCELNET_DEVICE", "cpu")
    model_name = os.environ.get("ACCELNET_DEVICE_MODEL")
    emulated = os.environ.get("ACCELNET_EMULATED") == "1"
    version = os.environ.get("SERVICE_VERSION", "1")
    hold = (service_seconds(base_ms, model_name) if emulated else 0.0) + hold_ms / 1e3
    busy = asyncio.Lock()

    async def healthz(request: Request) -> PlainTextResponse:
        return PlainTextResponse("ok")

    async def pid(request: Request) -> JSONResponse:
        return JSONResponse({"pid": os.getpid()})

    async def predict(request: Request) -> JSONResponse:
        if request.method == "POST":
            body = await request.json()
            pixels = body.get("pixels") if isinstance(body, dict) else None
            if not isinstance(pixels, list) or len(pixels) != 64:
                return JSONResponse({"error": "pixels: a list of 64 numbers"}, 422)
            sample = np.asarray(pixels, dtype=float).reshape(1, -1)
        else:
            try:
                k = int(request.query_params.get("index", "0")) % len(x_test)
            except ValueError:
                return JSONResponse({"error": "index: a whole number"}, 422)
            sample = x_test[k : k + 1]
        async with busy:  # one request at a time on the device
            digit = int(classify(sample)[0])
            if hold:
                await asyncio.sleep(hold)
        return JSONResponse({"digit": digit, "device": device, "model": model_name,
                             "version": version, "classifier": model})  # fmt: skip

    return Starlette(routes=[Route("/healthz", healthz), Route("/pid", pid),
                             Route("/predict", predict, methods=["GET", "POST"])])  # fmt: skip


def main(argv: list[str] | None = None) -> None:
    """Serve until stopped."""
    p = service_args(__doc__.split("\n")[0])
    p.add_argument(
        "--base-ms",
        type=float,
        default=20.0,
        help="ms per request on a 100 TFLOP/s device, when emulated (default 20)",
    )
    p.add_argument(
        "--hold-ms",
        type=float,
        default=0.0,
        help="a fixed extra hold per request on any device, one at a time",
    )
    p.add_argument(
        "--model",
        choices=("logreg", "torch"),
        default="logreg",
        help="scikit-learn's logistic regression, or a small torch MLP",
    )
    args = p.parse_args(argv)
    app = make_app(args.base_ms, args.hold_ms, args.model)
    serve_app(app, args.port)


if __name__ == "__main__":
    main()
