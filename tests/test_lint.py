"""The codebase passes ruff (configured in pyproject.toml), and its text speaks only of the project: no file tells how
the work on it was organised (the patterns below say what that is)."""
import ast
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


def _docstrings(tree) -> set[int]:
    return {id(body[0]) for node in ast.walk(tree)
            if isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
            and (body := node.body) and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant)}


def test_no_page_writes_a_stray_value():
    """Streamlit's magic writes any value standing alone on a line of a page (`a.append(x), b.append(y)` drew "None
    None" on the Attention page): in app.py and pages/ a line that is only an expression is a call (or a docstring)."""
    stray = []
    for path in [ROOT / "app.py", *sorted((ROOT / "pages").glob("*.py"))]:
        tree = ast.parse(path.read_text(encoding="utf-8"))
        docs = _docstrings(tree)
        stray += [f"{path.name}:{node.lineno}: {ast.unparse(node)[:60]}" for node in ast.walk(tree)
                  if isinstance(node, ast.Expr) and id(node) not in docs
                  and not isinstance(node.value, (ast.Call, ast.Await, ast.Yield, ast.YieldFrom))]
    assert not stray, stray


# ---- the project speaks only of itself ----------------------------------------------------------------------------
# A machine is named by what it is ("a 2-core x86 CPU", "an NVIDIA H200"); a figure by its date. Streamlit's own
# sessions (st.session_state, a learner's, "this one is already training") stay. The words this check looks for are
# spelled in pieces here (SES, RND, LNT, ISS below), so that this file passes its own check.
SES, RND, LNT, ISS = "sess" + "ion", "ro" + "und", "le" + "nt", "iss" + "ue"
WORDS = {"S": SES, "R": RND, "L": LNT, "I": ISS}

_ORDINALS = ("first|second|third|fourth|fifth|sixth|seventh|eighth|ninth|tenth|eleventh|twelfth|thirteenth|"
             "fourteenth|fifteenth|sixteenth|seventeenth|eighteenth|nineteenth|twentieth|thirtieth|fortieth|"
             r"twenty[- ](?:first|second|third|fourth|fifth|sixth|seventh|eighth|ninth)|\d+(?:st|nd|rd|th)")
_NUMBERS = r"one|two|three|four|five|six|seven|eight|nine|ten|\d+"
_MACHINE = r"(?:GPU|GPUs|machine|machines|device|devices|H200|H100|A100|CUDA|accelerator|accelerators)"
_GIVEN = rf"(?:{LNT}|{LNT[:3]}d|{LNT[:3]}ds|{LNT[:3]}ding|loaned|on loan|borrowed)"

WORK_TALK = {
    f"a numbered {SES}": rf"\b(?:{_ORDINALS})\s+{SES}s?\b",
    # "this S" ending a clause; a Streamlit one goes on ("this S's URL", "this S is already training")
    f"a {SES} named as such": rf"\b(?:last|previous|next)\s+{SES}\b|\bthis\s+{SES}\b(?=\s*(?:[,.;:)!?]|\Z))"
                            rf"|\b(?:GPU|device|work)\s+{SES}s?\b",
    f"a numbered {RND}": rf"(?<![Aa] )\b{RND}[- ](?:{_NUMBERS})\b(?![-\w])",  # not "a R one" (a number)
    f"a {RND} as such": rf"\b(?:this|last|previous)\s+{RND}\b|\b{RND}s?\s+of\s+(?:work|changes)\b",
    f"a machine {LNT} or not": rf"\b{_GIVEN}\b[^.\n]{{0,60}}\b{_MACHINE}\b|\b{_MACHINE}\b[^.\n]{{0,60}}\b{_GIVEN}\b",
    f"an {ISS} number": rf"\b{ISS}s?\s*#?\d+",
    f"the {ISS} as a source": rf"\bthe\s+{ISS}(?:'s\b|\s+(?:names|sets|gives|asks|says|wants)\b)"
                            rf"|\b(?:from|in|by|of|per)\s+the\s+{ISS}\b|\({ISS}\b",
}

# Not prose of the project: binary files, weights, tokenizer files, and the corpus samples shipped beside a model.
_SKIP_SUFFIXES = {".safetensors", ".npz", ".npy", ".pt", ".bin", ".png", ".jpg", ".jpeg", ".gif", ".ico", ".webp",
                  ".tiktoken", ".tgz", ".gz", ".zip", ".woff", ".woff2", ".ttf"}
_SKIP_PATHS = (re.compile(r"assets/models/[^/]+/heldout_[^/]+\.txt"), re.compile(r"assets/encodings/"))


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


# With the words as placeholders ({S}, {R}, {L}, {I} above), filled in at test time.
WORK_TALK_EXAMPLES = [
    "Measured in the nineteenth {S} on this machine.", "the fourteenth\n{S}'s figures", "the 12th {S}",
    "this {S}, no GPU was {L}", "(last {S} 3.0 s)", "no figure this {S}.",
    "an NVIDIA H200 {L} for 15 minutes", "a machine not {L} to us",
    "the {R}-two analyses", "{R} 2 of the work", "after the changes of this {R}", "Target ({I} 21):",
    "{I} #7", "prints the {I}'s targets", "the sizes the {I} names", "the defects of the {I}",
    "({I}: 0.906 on a sentence)", "until a GPU {S} runs the longer recipe"]


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
    is, a figure by its date and machine (this file included: it spells the words it looks for in pieces)."""
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
