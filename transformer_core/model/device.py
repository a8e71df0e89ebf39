"""Pick the device: "auto" (CUDA when available, else the CPU), "cpu", "cuda" or "cuda:N"."""
from __future__ import annotations

import torch

from ..errors import DeviceError


def pick_device(preference: str | torch.device | None = None) -> torch.device:
    """The device to run on; an unknown name or an unavailable CUDA raises DeviceError."""
    if isinstance(preference, torch.device):
        preference = str(preference)
    choice = (preference or "auto").strip().lower()
    if choice == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(choice)
    except RuntimeError as exc:
        raise DeviceError("device_unknown", device=choice[:40]) from exc
    if device.type == "cuda" and not torch.cuda.is_available():
        raise DeviceError("device_no_cuda", device=choice)
    return device


def device_name(device: torch.device) -> str:
    """Human-readable name: the GPU's name, or 'CPU'."""
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return "CPU"


def native_bf16(device: torch.device) -> bool:
    """Whether bfloat16 autocast pays on this device: CUDA, or a CPU with AMX tiles (Intel Sapphire Rapids and
    later: a training step of the default 1.6 times as fast). Other CPUs emulate bfloat16 and would be slower."""
    if device.type == "cuda":
        return True
    amx = getattr(torch.cpu, "_is_amx_tile_supported", None)  # (a private check; absent in some builds)
    return device.type == "cpu" and amx is not None and bool(amx())
