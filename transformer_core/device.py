"""Pick the device: an explicit argument, else $TRANSFORMER_EXPLORER_DEVICE, else CUDA when available."""
from __future__ import annotations

import os

import torch

ENV_VAR = "TRANSFORMER_EXPLORER_DEVICE"


def pick_device(preference: str | None = None) -> torch.device:
    """Return the device to run on; an unavailable CUDA request raises a clear ValueError."""
    choice = (preference or os.environ.get(ENV_VAR) or "auto").strip().lower()
    if choice == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(choice)
    except RuntimeError as exc:
        raise ValueError(f"unknown device {choice!r} (use auto, cpu or cuda)") from exc
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device {choice!r} was requested but CUDA is not available on this machine")
    return device


def device_name(device: torch.device) -> str:
    """Human-readable name: the GPU's name, or 'CPU'."""
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return "CPU"
