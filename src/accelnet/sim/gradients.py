"""What a data-parallel training step communicates: the gradient, one allreduce of every
parameter (fp32, 4 bytes each), per job family of Gavel's throughput table.

Parameter counts are those of the models Gavel's workloads train
(``stanford-futuredata/gavel``, ``workloads/pytorch``), counted from their definitions:

- ResNet-18 (CIFAR-10): 11.2 M; ResNet-50 (ImageNet): 25.6 M.
- Transformer (attention-is-all-you-need-pytorch on Multi30k: d_model 512, 6 + 6 layers,
  about 10 k tokens each side): about 54 M.
- LM (PyTorch's word language model on Wikitext-2, the workload's defaults: 2-layer LSTM,
  emsize = nhid = 200, 33,278 tokens): 14.0 M, almost all in the embedding and decoder.
- Recommendation (autoencoder on ML-20M), A3C and CycleGAN run on one device in the table
  and communicate nothing; their entries are for completeness.
"""

from __future__ import annotations

from typing import Final

PARAMS: Final = {
    "ResNet-18": 11.2e6,
    "ResNet-50": 25.6e6,
    "Transformer": 54e6,
    "LM": 14.0e6,
    "Recommendation": 34e6,
    "A3C": 1.1e6,
    "CycleGAN": 28.3e6,
}


def gradient_bytes(job_type: str) -> float | None:
    """Bytes allreduced per step by a job of ``job_type`` (``"ResNet-50 (batch size 64)"``
    and ``"ResNet-50"`` alike), None for a type of no known family."""
    family = job_type.split(" (", 1)[0]
    params = PARAMS.get(family)
    return None if params is None else params * 4.0
