"""Models saved as folders (weights, config, card): the shipped ones in assets/models, and the ones trained or
uploaded on this server. A folder that cannot be read is skipped (and said once), never breaks the list."""
from __future__ import annotations

import json
import logging
import re
from pathlib import Path

from ..errors import ModelSourceError
from ..train.checkpoint import CARD, CONFIG, WEIGHTS, load_checkpoint, read_card
from . import ModelEntry, Places

log = logging.getLogger(__name__)
REF = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,63}")  # a folder name; never a path
MAX_SMALL_FILE = 4 << 20  # a config or card larger than this is not one (and is not read on every listing)
_reported: set[str] = set()


def folder_card(folder: Path) -> dict | None:
    """The card plus arch and encoding from the config, or None (logged once) for a broken folder."""
    try:
        if any((folder / f).is_file() and (folder / f).stat().st_size > MAX_SMALL_FILE for f in (CONFIG, CARD)):
            raise ValueError("file too large")
        config = json.loads((folder / CONFIG).read_text(encoding="utf-8"))
        card = read_card(folder)
        if not isinstance(config["arch"], str) or not isinstance(config["encoding"], str):
            raise TypeError("arch and encoding must be names")
        return {**card, "arch": config["arch"], "encoding": config["encoding"]}
    except Exception as exc:  # noqa: BLE001 - one bad folder must not break the list for everyone
        if str(folder) not in _reported:
            _reported.add(str(folder))
            log.warning("skipping model folder %s: %s", folder.name, type(exc).__name__)
        return None


def _order(card: dict) -> float:
    """A card's place in the list (99 unless it says otherwise with a number)."""
    order = card.get("order", 99)
    return order if isinstance(order, (int, float)) and not isinstance(order, bool) and order == order else 99


class FolderSource:
    def __init__(self, kind: str, where: str) -> None:
        self.kind, self.where = kind, where  # `where`: the Places field naming the folder

    def folder(self, places: Places) -> Path:
        return Path(getattr(places, self.where))

    def entries(self, places: Places) -> list[ModelEntry]:
        root = self.folder(places)
        out = []
        for folder in sorted(root.iterdir()) if root.is_dir() else []:
            if not REF.fullmatch(folder.name) or not (folder / WEIGHTS).is_file():
                continue
            card = folder_card(folder)
            if card is not None:
                name = card.get("name")
                out.append(ModelEntry(f"{self.kind}:{folder.name}", name if isinstance(name, str) and name.strip()
                                      else folder.name, self.kind, card))
        return sorted(out, key=lambda e: (_order(e.card), e.label))

    def load(self, ref: str, places: Places, device=None):
        folder = self.folder(places) / ref
        if not REF.fullmatch(ref) or not (folder / WEIGHTS).is_file():
            raise ModelSourceError("model_unknown")
        model, card = load_checkpoint(folder, device)
        return model, {**card, "arch": model.cfg.arch, "encoding": model.cfg.encoding}

    def load_bytes(self, ref: str, places: Places) -> int:
        """The weights file twice: read, then copied into the model."""
        return 2 * (self.folder(places) / ref / WEIGHTS).stat().st_size if REF.fullmatch(ref) else 0


SOURCES = [FolderSource("shipped", "shipped_dir"), FolderSource("user", "user_dir")]
