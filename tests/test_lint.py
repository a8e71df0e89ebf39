"""The codebase passes ruff (configured in pyproject.toml), and its text speaks only of the project: no file tells how
the work on it was organised (the patterns below say what that is)."""
import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_ruff_finds_nothing():
    ruff = shutil.which("ruff")
    if ruff is None:
        pytest.skip("ruff is not installed (it is in requirements.txt)")
    result = subprocess.run([ruff, "check", "--output-format", "concise", "."], cwd=ROOT, capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr


# ---- the project speaks only of itself ----------------------------------------------------------------------------
# A machine is named by what it is ("a 2-core x86 CPU", "an NVIDIA H200"); a figure by its date. Streamlit's sessions
# (st.session_state, a learner's session, "this session is already training") are Streamlit's and stay.

_ORDINALS = ("first|second|third|fourth|fifth|sixth|seventh|eighth|ninth|tenth|eleventh|twelfth|thirteenth|"
             "fourteenth|fifteenth|sixteenth|seventeenth|eighteenth|nineteenth|twentieth|thirtieth|fortieth|"
             r"twenty[- ](?:first|second|third|fourth|fifth|sixth|seventh|eighth|ninth)|\d+(?:st|nd|rd|th)")
_NUMBERS = r"one|two|three|four|five|six|seven|eight|nine|ten|\d+"
_MACHINE = r"(?:GPU|GPUs|machine|machines|device|devices|H200|H100|A100|CUDA|accelerator|accelerators)"
_LENT = r"(?:lent|lend|lends|lending|loaned|on loan|borrowed)"

WORK_TALK = {
    "a numbered work session": rf"\b(?:{_ORDINALS})\s+sessions?\b",
    # "this session" ending a clause ("no GPU was lent this session,"); a Streamlit one goes on ("this session's URL",
    # "this session is already training", "in this session yet")
    "a work session named as such": r"\b(?:last|previous|next)\s+session\b|\bthis\s+session\b(?=\s*(?:[,.;:)!?]|\Z))"
                                    r"|\b(?:GPU|device|work)\s+sessions?\b",
    "a numbered round of work": rf"(?<![Aa] )\bround[- ](?:{_NUMBERS})\b(?![-\w])",  # not "a round one" (number)
    "a round of work": r"\b(?:this|last|previous)\s+round\b|\brounds?\s+of\s+(?:work|changes)\b",
    "a machine lent or not": rf"\b{_LENT}\b[^.\n]{{0,60}}\b{_MACHINE}\b|\b{_MACHINE}\b[^.\n]{{0,60}}\b{_LENT}\b",
    "an issue number": r"\bissues?\s*#?\d+",
    "the issue as a source": r"\bthe\s+issue(?:'s\b|\s+(?:names|sets|gives|asks|says|wants)\b)"
                             r"|\b(?:from|in|by|of|per)\s+the\s+issue\b|\(issue\b",
}

# Not prose of the project: binary files, weights, tokenizer files, and the corpus samples shipped beside a model.
_SKIP_SUFFIXES = {".safetensors", ".npz", ".npy", ".pt", ".bin", ".png", ".jpg", ".jpeg", ".gif", ".ico", ".webp",
                  ".tiktoken", ".tgz", ".gz", ".zip", ".woff", ".woff2", ".ttf"}
_SKIP_PATHS = (re.compile(r"assets/models/[^/]+/heldout_[^/]+\.txt"), re.compile(r"assets/encodings/"),
               re.compile(r"tests/test_lint\.py"))  # this file spells out what it looks for



def project_text_files() -> list[Path]:
    """Every file git knows of or would add (tracked, and untracked but not ignored) that is text of the project."""
    try:
        out = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                             capture_output=True, timeout=60, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        pytest.skip("not a git checkout")
    files = []
    for name in sorted(set(out.decode("utf-8", "surrogateescape").split("\0")) - {""}):
        path = ROOT / name
        if path.suffix.lower() in _SKIP_SUFFIXES or any(p.match(name) for p in _SKIP_PATHS) or not path.is_file():
            continue
        files.append(path)
    return files


def work_talk(text: str) -> list[tuple[int, str, str]]:
    """(line, rule, the words) of every phrase in `text` that tells how the work was organised."""
    hits = []
    for rule, pattern in WORK_TALK.items():
        for m in re.finditer(pattern, text, flags=re.IGNORECASE):
            hits.append((text.count("\n", 0, m.start()) + 1, rule, " ".join(m.group(0).split())))
    return sorted(hits)


# Written with the flagged words as placeholders, filled in at test time, so that this file's own text is not
# what it forbids: {S} a work session, {R} a round, {L} lent, {I} an issue.
WORK_TALK_EXAMPLES = [
    "Measured in the nineteenth {S} on this machine.", "the fourteenth\n{S}'s figures", "the 12th {S}",
    "this {S}, no GPU was {L}", "(last {S} 3.0 s)", "no figure this {S}.",
    "an NVIDIA H200 {L} for 15 minutes", "a machine not {L} to us",
    "the {R}-two analyses", "{R} 2 of the work", "after the changes of this {R}", "Target ({I} 21):",
    "{I} #7", "prints the {I}'s targets", "the sizes the {I} names", "the defects of the {I}",
    "({I}: 0.906 on a sentence)", "until a GPU {S} runs the longer recipe"]
WORDS = {"S": "sess" + "ion", "R": "ro" + "und", "L": "le" + "nt", "I": "iss" + "ue"}


@pytest.mark.parametrize("text", [t.format(**WORDS) for t in WORK_TALK_EXAMPLES])
def test_the_lint_catches_work_talk(text):
    assert work_talk(text), text


@pytest.mark.parametrize("text", [
    "st.session_state holds a learner's session", "This session is already training a model: stop it.",
    "Nothing is training in this session yet.", "every session's script runs in its own thread",
    "a round trip through JSON", "round(x, 4)", "every round traces a new text", "the janitor's round goes on",
    "the first round starts on the default page", "measured on an NVIDIA H200", "a 2-core x86 CPU (AVX2)",
    "sticky sessions", "a reload is a new session", "possession of flocks", "an issue with the cache",
    "this session's URL", "(this session rendered in 3.1 s)", "the time a round one (1 trailing zero)",
    "a round two-digit number"])
def test_the_lint_leaves_streamlit_sessions_and_plain_words_alone(text):
    assert not work_talk(text), text


def test_the_project_speaks_only_of_itself():
    """No README, note, docstring, comment or string tells how the work was organised: a machine is named by what it
    is, a figure by its date and machine, never by a numbered session or round, a lent machine or an issue."""
    found = []
    for path in project_text_files():
        try:
            text = path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue  # not text
        rel = path.relative_to(ROOT).as_posix()
        for line, rule, words in work_talk(text):
            found.append(f"{rel}:{line}: {rule}: {words!r}")
    assert not found, "\n".join(found)
