"""The course's random-init presets (exactly as the course builds them), on any known encoding."""
from __future__ import annotations

from ..errors import ModelSourceError
from ..model.config import PRESETS, TransformerConfig, preset
from ..model.memory import param_bytes
from ..model.transformer import build_model
from ..text.tokenizer import ENCODINGS, load_encoding
from . import ModelEntry, Places

SHOWN = ("course-base", "course-base-scaled", "course-gpt", "course-gpt-modern", "course-gpt-qwen3")


def preset_key(name: str, encoding: str = "cl100k_base") -> str:
    return f"preset:{name}@{encoding}"


class PresetSource:
    kind = "preset"

    def entries(self, places: Places) -> list[ModelEntry]:
        return [ModelEntry(preset_key(p), p, self.kind, {"arch": PRESETS[p].arch, "encoding": "cl100k_base",
                                                          "random_init": True}) for p in SHOWN]

    def load(self, ref: str, places: Places, device=None):
        cfg = self.config(ref)
        return build_model(cfg, device), {"name": ref.partition("@")[0], "arch": cfg.arch, "encoding": cfg.encoding,
                                          "random_init": True}

    def config(self, ref: str) -> TransformerConfig:
        """The preset's config on its encoding ("course-base@o200k_base"), its vocabulary the encoding's."""
        name, _, encoding = ref.partition("@")
        encoding = encoding or "cl100k_base"
        if name not in PRESETS or encoding not in ENCODINGS:
            raise ModelSourceError("model_unknown")
        return preset(name, encoding=encoding, vocab_size=load_encoding(encoding).n_vocab)

    def load_bytes(self, ref: str, places: Places) -> int:
        """The model it builds (counted on the meta device: nothing allocated)."""
        return param_bytes(self.config(ref))


SOURCES = [PresetSource()]
