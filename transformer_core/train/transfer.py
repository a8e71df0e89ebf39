"""Start a training run from a trained model's weights, over a new vocabulary (a warm start).

Every weight but the token embeddings is copied as it is (the shapes must match). A token both vocabularies hold (by
its bytes) keeps its trained embedding; a new token starts as the mean of the embeddings of the pieces the old
vocabulary spells it with (" airport" = " air" + "port"), so the trained layers read a new whole word roughly as they
read its pieces, and training refines it. The old model comes from a folder, or from a folder of this repository at a
commit (`git:COMMIT:PATH`: the shipped default before the current one, kept by git rather than shipped twice).
"""
from __future__ import annotations

import subprocess
from pathlib import Path

import torch

from ..errors import TrainingError
from ..text.subset import bpe, subset_meta
from ..text.tokenizer import BUNDLED, load_encoding
from .checkpoint import load_checkpoint

ROOT = Path(__file__).resolve().parents[2]


def base_folder(init_from: str, cache_dir: str | Path = "") -> Path:
    """The folder of the model to start from: `init_from` itself, or `git:COMMIT:PATH` written out once into the
    cache (model.safetensors, config.json, card.json of PATH at COMMIT)."""
    if not init_from.startswith("git:"):
        return Path(init_from)
    _, commit, path = init_from.split(":", 2)
    from .corpus_data import DEFAULT_CACHE

    folder = Path(cache_dir or DEFAULT_CACHE) / "bases" / f"{Path(path).name}@{commit}"
    if not (folder / "model.safetensors").is_file():
        folder.mkdir(parents=True, exist_ok=True)
        for name in ("config.json", "card.json", "model.safetensors"):
            done = subprocess.run(["git", "show", f"{commit}:{path}/{name}"], cwd=ROOT, capture_output=True,
                                  check=False)
            if done.returncode != 0:
                raise TrainingError("train_init_missing", source=init_from,
                                    reason=done.stderr.decode("utf-8", "replace").strip()[-200:])
            (folder / f"{name}.part").write_bytes(done.stdout)
        for name in ("config.json", "card.json", "model.safetensors"):
            (folder / f"{name}.part").replace(folder / name)
    return folder


def token_bytes(cfg) -> list[bytes | None]:
    """Each model id's token bytes (None for ⟨unk⟩ and for special tokens, which keep their own rows by name). A
    subset's ids are its base's ranks: a token that a rebuilt subset of the same name dropped is read from the base
    (the model to start from was trained over the subset as it was)."""
    enc = load_encoding(cfg.encoding)
    meta = subset_meta(BUNDLED, cfg.encoding)
    base = load_encoding(meta["base"]) if meta else enc
    specials = set(enc._special_tokens.values())

    def raw(real: int) -> bytes:
        try:
            return enc.decode_single_token_bytes(real)
        except KeyError:
            return base.decode_single_token_bytes(real)

    return [None if real < 0 or real in specials else raw(real) for real in cfg.vocab_map]


@torch.no_grad()
def warm_start(model, init_from: str, cache_dir: str | Path = "") -> dict:
    """Load `init_from`'s weights into `model` (same sizes, another vocabulary); returns what was carried over."""
    old, _ = load_checkpoint(base_folder(init_from, cache_dir))
    new_state, old_state = model.state_dict(), old.state_dict()
    n_new, n_old = len(model.cfg.vocab_map), len(old.cfg.vocab_map)
    by_vocab = {k for k, v in new_state.items()  # the embedding, the (tied) output matrix and its bias
                if k in old_state and v.shape[:1] == (n_new,) and old_state[k].shape[:1] == (n_old,)}
    mismatched = [k for k, v in new_state.items() if k not in by_vocab
                  and (k not in old_state or old_state[k].shape != v.shape)]
    if mismatched:
        raise TrainingError("train_init_shape", source=init_from, names=", ".join(mismatched[:4]))
    old_bytes, new_bytes = token_bytes(old.cfg), token_bytes(model.cfg)
    old_rows = {b: i for i, b in enumerate(old_bytes) if b is not None}
    ranks = {b: old.cfg.vocab_map[i] for b, i in old_rows.items()}  # the old vocabulary's own BPE (byte fallback)
    by_id = {real: i for i, real in enumerate(old.cfg.vocab_map)}
    rows = []  # for each new model id: the old rows it starts from (their mean)
    for j, b in enumerate(new_bytes):
        if b is None:  # ⟨unk⟩ or a special token: its own row where the old model has one
            rows.append([by_id[model.cfg.vocab_map[j]]] if model.cfg.vocab_map[j] in by_id else [])
        else:
            rows.append([old_rows[b]] if b in old_rows else [old_rows[p] for p in bpe(b, ranks)[0]])
    state = dict(old_state)
    for k in by_vocab:
        state[k] = new_state[k].clone()
        for j, r in enumerate(rows):
            if r:
                state[k][j] = old_state[k][r].mean(0)
    model.load_state_dict({k: state[k] for k in new_state})
    kept = sum(1 for b in new_bytes if b in old_rows)
    return {"from": init_from, "embeddings_kept": kept, "embeddings_from_pieces": n_new - kept}
