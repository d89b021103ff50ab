"""The parts of ``symbolic.measured.measure`` that need no real torch: CUDA phase bookkeeping, results."""

from __future__ import annotations

from types import SimpleNamespace

from symbolic.measured import measure


class FakeCuda:
    """Stands in for torch.cuda: an allocator whose peak the test script sets per phase."""

    def __init__(self, peaks: dict[str, int]) -> None:
        self.peaks = peaks
        self.current_phase = "setup"
        self.resets = 0

    def synchronize(self, device: object) -> None:
        pass

    def max_memory_allocated(self, device: object) -> int:
        return self.peaks.get(self.current_phase, 0)

    def memory_allocated(self, device: object) -> int:
        return 100

    def reset_peak_memory_stats(self, device: object) -> None:
        self.resets += 1


def test_cuda_peak_names_the_phase_that_peaked():
    cuda = FakeCuda({"forward": 500, "backward": 900, "optimizer": 700})
    torch = SimpleNamespace(cuda=cuda)

    def one_step(phases: measure._CudaPhases) -> None:
        for name in ("zero_grad", "forward", "backward", "optimizer"):
            phases.phase = name
            cuda.current_phase = name

    result = measure._cuda_peak(torch, "cuda:0", None, None, None, one_step, steps=2)
    assert result.peak_bytes == 900 and result.phase == "backward"
    assert result.per_step == (900, 900) and result.baseline_bytes == 100 and result.method == "cuda"
    # each phase keeps its own peak (read and reset at the boundaries)
    assert result.phases == {"zero_grad": 0, "forward": 500, "backward": 900, "optimizer": 700}


def test_live_bytes_keep_a_peak_per_phase():
    class Storage:
        def __init__(self, n: int) -> None:
            self.n = n

        def nbytes(self) -> int:
            return self.n

    class Tensor:
        def __init__(self, n: int) -> None:
            self.device = SimpleNamespace(type="cpu")
            self.dtype, self.shape, self._st = "float32", (n,), Storage(n)

        def untyped_storage(self) -> Storage:
            return self._st

    live = measure._LiveBytes(detail=True)
    weights = Tensor(100)
    live.track(weights)
    live.phase = "forward"
    saved = Tensor(50)
    live.track(saved)
    live.phase = "backward"
    del saved  # freed: the weak reference's callback subtracts it
    grad = Tensor(30)
    live.track(grad)
    assert live.phase_peaks == {"setup": 100, "forward": 150, "backward": 150}
    assert live.current == 130 and live.peak == 150 and live.peak_phase == "forward"
    assert [n for n, _, _ in live.alive["forward"]] == [100, 50]


def test_results_are_plain_data():
    saved = measure.SavedTensors(10, 1, {"Linear": 10}, {"float32": 10})
    peak = measure.StepPeak("cpu", "dispatch", 1, 20, (15, 20), "backward", 2)
    data = measure.Measurement(3, 12, saved, peak, "2.13.0").as_dict()
    assert data["saved"]["by_module"] == {"Linear": 10} and data["peak"]["per_step"] == [15, 20]


def test_profiler_events_fold_each_aten_calls_scratch_into_its_net():
    """A kernel's own allocations (here 300 bytes made and freed inside a call) do not count; the tensor it
    returns (100) counts from the call's end; events outside every call stay as they are."""
    calls = measure._outermost([(10, 20), (12, 18), (30, 40)])  # the nested call belongs to the first  # noqa: SLF001
    assert calls == [(10, 20), (30, 40)]
    memory = [(5, 0, 50), (11, 1, 100), (13, 2, 300), (17, 3, -300), (25, 4, -50), (35, 5, 8), (36, 6, -8)]
    folded = measure._folded(memory, calls)  # noqa: SLF001
    assert folded == [(5, 0, 50), (20, -1, 100), (25, 4, -50)]
    ranges = [(0, 22, "forward"), (23, 50, "backward")]
    raw, tensors = {}, {}
    measure._phase_peaks(memory, ranges, 1000, raw)  # noqa: SLF001
    measure._phase_peaks(folded, ranges, 1000, tensors)  # noqa: SLF001
    assert raw == {"forward": 1450, "backward": 1108} and tensors == {"forward": 1150, "backward": 1100}
