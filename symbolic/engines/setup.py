"""What a serving question gives: the model, its weight and cache formats, the GPUs, the engine's flags.

``make_setup`` resolves everything once, so that an engine module only computes: the network
(``networks.load``), the weight format (``--weights``, else the config's ``quantization_config``,
else bf16; ``weights_from`` says which), the KV-cache element type, the per-GPU budget before the
engine's own fraction (``catalogs.budget``), the parallel layout and the engine's own flags.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from .. import formats
from ..catalogs.budget import Budget, make_budget
from ..core.errors import UserError
from ..networks.network import load
from ..networks.quantization import shipped_format
from ..networks.shape import ModelShape

DEFAULT_WEIGHTS = "bf16"
DEFAULT_KV = "bf16"
MAX_PARALLEL = 2**10  # tensor- or pipeline-parallel ranks


class ServeError(UserError):
    """A serving question that cannot be answered as asked: one line, exit 2."""


@dataclass(frozen=True)
class ServeSetup:
    """One serving question, resolved: every engine module reads this and nothing else."""

    engine: str
    network: ModelShape
    budget: Budget  # one GPU's usable bytes before the engine's own fraction (vLLM's, SGLang's)
    weights: str  # a formats name that plays the "weights" role
    weights_from: str  # "--weights", "quantization_config", "file" (a GGUF file's tensors) or "default"
    kv_dtype: str  # a formats name that plays the "kv" role
    tp: int = 1
    pp: int = 1
    seq: int | None = None  # the context length concurrency is asked at
    batch: int | None = None  # the concurrency the longest context is asked at
    options: Mapping[str, object] = field(default_factory=dict)  # the engine's own flags that were given

    @property
    def gpus(self) -> int:
        """GPUs in the job (tensor × pipeline ranks)."""
        return self.tp * self.pp

    @property
    def engine_budget(self) -> Budget:
        """``budget`` over CUDA's total memory, the total vLLM, SGLang and llama.cpp read (``Budget.over_cuda``)."""
        return self.budget.over_cuda()

    def option(self, dest: str, default: object = None) -> object:
        """The engine flag ``dest`` as given, else ``default``."""
        value = self.options.get(dest)
        return default if value is None else value


def total_note(setup: ServeSetup) -> str:
    """Which GPU total the engine's budget starts from, where it is not a size the user gave."""
    gpu = setup.budget.gpu
    if gpu.cuda_bytes is not None and gpu.cuda_bytes != gpu.bytes:
        return (f"GPU total: CUDA's {gpu.cuda_bytes / 2**30:.2f} GiB for {gpu.name} (published readings, "
                f"'symbolic gpus'), not nvidia-smi's {gpu.gib:.2f} GiB")
    if gpu.cuda_bytes is None and gpu.basis in ("nvidia-smi", "vendor"):
        what = "nvidia-smi's" if gpu.basis == "nvidia-smi" else "the vendor's"
        return (f"GPU total: {what} {gpu.gib:.2f} GiB for {gpu.name}: no published CUDA total, which is a little "
                f"lower (so this budget is a little high); --gpu SIZE gives CUDA's own")
    return ""


def total_figures(setup: ServeSetup) -> dict[str, object]:
    """The GPU total the engine read, for --json: bytes and which number it is (cuda, nvidia-smi, given, ...)."""
    gpu = setup.engine_budget.gpu
    return {"gpu_total_bytes": gpu.bytes, "gpu_total_basis": gpu.basis}


def model_weights(network: ModelShape) -> tuple[str, str]:
    """The weight format a model ships in (its config's ``quantization_config``) and where that was read."""
    fmt = shipped_format(network)  # a one-line error for a quantization_config that cannot be read
    if fmt and getattr(network, "stored_tensors", ()):
        return fmt, "file"  # a GGUF file's own tensor types
    return (fmt, "quantization_config") if fmt else (DEFAULT_WEIGHTS, "default")


def make_setup(model: object, engine: str, gpu: object, *, weights: str | None = None, kv_dtype: str | None = None,
               tp: int = 1, pp: int = 1, seq: int | None = None, batch: int | None = None,
               options: Mapping[str, object] | None = None) -> ServeSetup:
    """Resolve a serving question (model, formats, GPU, layout) into a ``ServeSetup``."""
    network = load(model)
    for name, value in (("tp", tp), ("pp", pp)):
        if not isinstance(value, int) or not 1 <= value <= MAX_PARALLEL:
            raise ServeError(f"{name} must be a whole number from 1 to {MAX_PARALLEL}, got {value!r}")
    for name, value in (("seq", seq), ("batch", batch)):
        if value is not None and (not isinstance(value, int) or value < 1):
            raise ServeError(f"{name} must be a whole number of at least 1, got {value!r}")
    if weights is None:
        weights, weights_from = model_weights(network)
    else:
        weights_from = "--weights"
    if not (weights == getattr(network, "quantization", None) and getattr(network, "stored_tensors", ())):
        formats.get(weights, "weights", "weight format")  # a file's own format is its tensors, no table entry
    kv = kv_dtype or DEFAULT_KV
    formats.get(kv, "kv", "KV-cache dtype")
    given = {k: v for k, v in (options or {}).items() if v is not None}
    return ServeSetup(engine, network, make_budget(gpu), weights, weights_from, kv, tp, pp, seq, batch, given)
