"""GPU rates for the time half: peak dense FLOP/s per dtype, HBM, NVLink and network bandwidth.

Every figure is the vendor's, from the datasheet named in the entry. Conventions:

- FLOP/s are *dense* (no 2:4 sparsity). Where a datasheet prints only the sparse figure (the
  H100, H200, H100 NVL and B200 tensor-core rows, marked "with sparsity"), the dense rate is half
  of it, as the datasheets' footnotes say.
- Bandwidths are bytes/s per GPU and per direction: NVLink datasheets give the total of both
  directions (H100 "900 GB/s"), so the catalogue keeps half (450 GB/s); network bandwidth is
  the GPU's share of the node's compute fabric in the DGX/HGX datasheet (DGX H100: eight
  400 Gb/s ConnectX-7 ports for eight GPUs → 50 GB/s per GPU and direction).
- ``gpus_per_node``: GPUs that share one NVLink domain (8 on HGX/DGX boards, 2 for NVLink-bridged
  H100 NVL pairs); a group larger than this goes over the network.
- PCIe cards without NVLink (T4, L4, L40S, RTX 3090, RTX 4090): the link between GPUs of one
  server is PCIe, whose datasheet figure (PCIe Gen4 x16: "64 GB/s bidirectional") is halved like
  NVLink's, in a server of 8 cards (AWS's g4dn, g6 and g6e instances hold up to 8 T4, L4 and
  L40S); no network figure, so a group beyond one server needs a custom GPU file. GeForce cards
  have no datasheet: their figures are the architecture whitepaper's table for that card, at FP32
  accumulation (what training and PyTorch's matmuls use; GeForce tensor cores run FP16
  accumulation twice as fast).

``WITHOUT_RATES`` names the catalogue GPUs that have no published rates, and why; ``symbolic
time`` says so and asks for a custom GPU file. The V100 and T4 have no bf16 and the A100 no fp8:
asking for them is an error.
"""

from __future__ import annotations

T = 10**12
G = 10**9

_V100 = ("NVIDIA Tesla V100 datasheet (SXM2): 15.7 TFLOP/s FP32, 125 TFLOP/s tensor (FP16), 900 GB/s HBM2, "
         "NVLink 300 GB/s; NVIDIA DGX-1 datasheet: 4 × 100 Gb/s EDR InfiniBand for 8 GPUs")
_A100 = ("NVIDIA A100 Tensor Core GPU datasheet (SXM): 19.5 TFLOP/s FP32, 156 TF32, 312 BF16/FP16 dense, NVLink "
         "600 GB/s, HBM {bw}; NVIDIA DGX A100 datasheet: 8 × 200 Gb/s HDR InfiniBand (ConnectX-6) for 8 GPUs")
_H100 = ("NVIDIA H100 Tensor Core GPU datasheet, SXM5: 67 TFLOP/s FP32, 989 TF32 / 1,979 BF16 / 3,958 FP8 with "
         "sparsity (dense: half), 3.35 TB/s HBM3, NVLink 900 GB/s; NVIDIA DGX H100 datasheet: 8 × 400 Gb/s "
         "ConnectX-7 for 8 GPUs")
_H100_NVL = ("NVIDIA H100 Tensor Core GPU datasheet, H100 NVL: 60 TFLOP/s FP32, 835 TF32 / 1,671 BF16 / 3,341 FP8 "
             "with sparsity (dense: half), 3.9 TB/s HBM3, NVLink bridge 600 GB/s between a pair")
_H200 = ("NVIDIA H200 Tensor Core GPU datasheet, H200 SXM: 67 TFLOP/s FP32, 989 TF32 / 1,979 BF16 / 3,958 FP8 "
         "with sparsity (dense: half), 4.8 TB/s HBM3e, NVLink 900 GB/s; NVIDIA DGX H200 datasheet: 8 × 400 Gb/s "
         "ConnectX-7 for 8 GPUs")
_B200 = ("NVIDIA HGX B200 datasheet (8 GPUs): 600 TFLOP/s FP32, 18 PFLOP/s TF32, 36 BF16, 72 FP8 with sparsity, "
         "64 TB/s HBM3e, NVLink 1.8 TB/s per GPU; per GPU ÷ 8, dense ÷ 2; NVIDIA DGX B200 datasheet: 8 × 400 Gb/s "
         "ConnectX-7 for 8 GPUs")
_T4 = ("NVIDIA T4 Tensor Core GPU datasheet: 8.1 TFLOP/s FP32, 65 TFLOP/s mixed precision (FP16/FP32; Turing has no "
       "sparsity, so dense), PCIe Gen3 x16 interconnect 32 GB/s; NVIDIA T4 board product brief: peak memory bandwidth "
       "up to 320 GB/s GDDR6")
_L4 = ("NVIDIA L4 Tensor Core GPU datasheet: 30.3 TFLOP/s FP32, 120 TF32 / 242 BF16 and FP16 / 485 FP8 with "
       "sparsity (dense: half), 300 GB/s GDDR6, PCIe Gen4 x16 64 GB/s")
_L40S = ("NVIDIA L40S datasheet: 91.6 TFLOP/s FP32, 183 TF32 / 362.05 BF16 and FP16 / 733 FP8 dense (366, 733 and "
         "1,466 with sparsity), 864 GB/s GDDR6, PCIe Gen4 x16 64 GB/s bidirectional")
_RTX_3090 = ("NVIDIA Ampere GA102 GPU architecture whitepaper, Appendix A (GeForce RTX 3090): 35.6 TFLOP/s FP32, "
             "35.6 TF32 and 71 BF16 and FP16 tensor with FP32 accumulate, dense (71 and 142 with sparsity), 936 GB/s "
             "GDDR6X, PCIe Gen4 x16 64 GB/s (the optional NVLink bridge is not assumed)")
_RTX_4090 = ("NVIDIA Ada GPU architecture whitepaper, Appendix (GeForce RTX 4090): 82.6 TFLOP/s FP32, 82.6 TF32, "
             "165.2 BF16 and FP16 and 330.3 FP8 tensor with FP32 accumulate, dense (165.2, 330.4 and 660.6 with "
             "sparsity), 1,008 GB/s GDDR6X, PCIe Gen4 x16 64 GB/s")
_MI300X = ("AMD Instinct MI300X accelerator datasheet: 163.4 TFLOP/s FP32, 653.7 TF32, 1,307.4 BF16/FP16, "
           "2,614.9 FP8 (dense), 5.3 TB/s HBM3, Infinity Fabric 896 GB/s peak aggregate to the 7 peers")


def _rates(flops: dict[str, float], hbm: float, nvlink_total: float, network: float | None, source: str,
           per_node: int = 8) -> dict[str, object]:
    return {"flops": flops, "hbm_bandwidth": hbm, "nvlink_bandwidth": nvlink_total / 2,
            "network_bandwidth": network, "gpus_per_node": per_node, "rates_source": source}


_V100_RATES = _rates({"fp32": 15.7 * T, "fp16": 125 * T}, 900 * G, 300 * G, 4 * 100 * G / 8 / 8, _V100)
_A100_FLOPS = {"fp32": 19.5 * T, "tf32": 156 * T, "bf16": 312 * T, "fp16": 312 * T}
_HOPPER_FLOPS = {"fp32": 67 * T, "tf32": 989 * T / 2, "bf16": 1979 * T / 2, "fp16": 1979 * T / 2, "fp8": 3958 * T / 2}

RATES: dict[str, dict[str, object]] = {
    "v100-16gb": _V100_RATES,
    "v100-32gb": _V100_RATES,
    "a100-40gb": _rates(_A100_FLOPS, 1555 * G, 600 * G, 200 * G / 8, _A100.format(bw="1,555 GB/s (40GB)")),
    "a100-80gb": _rates(_A100_FLOPS, 2039 * G, 600 * G, 200 * G / 8, _A100.format(bw="2,039 GB/s (80GB SXM)")),
    "h100-80gb": _rates(_HOPPER_FLOPS, 3350 * G, 900 * G, 400 * G / 8, _H100),
    "h100-94gb": _rates({"fp32": 60 * T, "tf32": 835 * T / 2, "bf16": 1671 * T / 2, "fp16": 1671 * T / 2,
                         "fp8": 3341 * T / 2}, 3900 * G, 600 * G, None, _H100_NVL, per_node=2),
    "h200-141gb": _rates(_HOPPER_FLOPS, 4800 * G, 900 * G, 400 * G / 8, _H200),
    "b200": _rates({"fp32": 600 * T / 8, "tf32": 18000 * T / 16, "bf16": 36000 * T / 16, "fp16": 36000 * T / 16,
                    "fp8": 72000 * T / 16}, 64000 * G / 8, 1800 * G, 400 * G / 8, _B200),
    "t4": _rates({"fp32": 8.1 * T, "fp16": 65 * T}, 320 * G, 32 * G, None, _T4),
    "l4": _rates({"fp32": 30.3 * T, "tf32": 120 * T / 2, "bf16": 242 * T / 2, "fp16": 242 * T / 2, "fp8": 485 * T / 2},
                 300 * G, 64 * G, None, _L4),
    "l40s": _rates({"fp32": 91.6 * T, "tf32": 183 * T, "bf16": 362.05 * T, "fp16": 362.05 * T, "fp8": 733 * T},
                   864 * G, 64 * G, None, _L40S),
    "rtx-3090": _rates({"fp32": 35.6 * T, "tf32": 35.6 * T, "bf16": 71 * T, "fp16": 71 * T}, 936 * G, 64 * G, None,
                       _RTX_3090),
    "rtx-4090": _rates({"fp32": 82.6 * T, "tf32": 82.6 * T, "bf16": 165.2 * T, "fp16": 165.2 * T, "fp8": 330.3 * T},
                       1008 * G, 64 * G, None, _RTX_4090),
    "mi300x": _rates({"fp32": 163.4 * T, "tf32": 653.7 * T, "bf16": 1307.4 * T, "fp16": 1307.4 * T,
                      "fp8": 2614.9 * T}, 5300 * G, 896 * G, None, _MI300X),
}

# Catalogue GPUs without published rates, and why (``symbolic time`` prints the reason).
WITHOUT_RATES: dict[str, str] = {
    "a10g": "NVIDIA publishes no datasheet for the A10G, AWS's variant of the A10, and its tensor rates differ from "
            "the A10's datasheet, so the catalogue gives it none",
}
