"""GPT-2 small through huggingface_hub, against a local HTTP server standing in for the hub (HF_ENDPOINT):
one download with progress, then it loads offline from the standard cache like every other model."""
import hashlib
import json
import os
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import torch
from safetensors.torch import save as save_safetensors

ROOT = Path(__file__).resolve().parents[2]
D, HEADS, VOCAB, CTX = 16, 2, 50257, 32


def tiny_gpt2_files() -> dict[str, bytes]:
    """A one-layer GPT-2 with Hugging Face names (real vocabulary size, so any text traces) and its config.json."""
    g = torch.Generator().manual_seed(0)

    def r(*shape):
        return torch.randn(*shape, generator=g) * 0.2

    h = "h.0."
    state = {"wte.weight": r(VOCAB, D), "wpe.weight": r(CTX, D), "ln_f.weight": 1 + r(D), "ln_f.bias": r(D),
             h + "ln_1.weight": 1 + r(D), h + "ln_1.bias": r(D), h + "ln_2.weight": 1 + r(D), h + "ln_2.bias": r(D),
             h + "attn.c_attn.weight": r(D, 3 * D), h + "attn.c_attn.bias": r(3 * D),
             h + "attn.c_proj.weight": r(D, D), h + "attn.c_proj.bias": r(D),
             h + "mlp.c_fc.weight": r(D, 4 * D), h + "mlp.c_fc.bias": r(4 * D),
             h + "mlp.c_proj.weight": r(4 * D, D), h + "mlp.c_proj.bias": r(D)}
    return {"model.safetensors": save_safetensors(state), "config.json": json.dumps({"n_head": HEADS}).encode()}


class FakeHub(BaseHTTPRequestHandler):
    files: dict[str, bytes] = {}  # GPT-2's
    repos: dict[str, dict[str, bytes]] = {}  # other repositories' files
    requests: list[str] = []

    def _file(self) -> bytes | None:
        for repo, files in {"openai-community/gpt2": self.files, **self.repos}.items():
            prefix = f"/{repo}/resolve/main/"
            if self.path.startswith(prefix):
                return files.get(self.path[len(prefix):])
        return None

    def _headers(self, body: bytes) -> None:
        self.send_header("X-Repo-Commit", "0" * 40)
        self.send_header("ETag", f'"{hashlib.sha256(body).hexdigest()}"')
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()

    def do_HEAD(self):
        self.requests.append(f"HEAD {self.path}")
        body = self._file()
        if body is None:
            self.send_error(404)
            return
        self.send_response(200)
        self._headers(body)

    def do_GET(self):
        self.requests.append(f"GET {self.path}")
        body = self._file()
        if body is None:
            self.send_error(404)
            return
        self.send_response(200)
        self._headers(body)
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture
def hub():
    FakeHub.files, FakeHub.repos, FakeHub.requests = tiny_gpt2_files(), {}, []
    server = ThreadingHTTPServer(("127.0.0.1", 0), FakeHub)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


def run_python(code: str, env: dict, *args: str) -> dict:
    """Run code in a fresh interpreter (huggingface_hub reads HF_ENDPOINT / HF_HOME once, at import)."""
    full = {k: v for k, v in os.environ.items() if not k.startswith("HF_")} | env
    out = subprocess.run([sys.executable, "-c", code, *args], cwd=ROOT, env=full, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


DOWNLOAD = """
import json
from service import catalog, downloads
from service.settings import settings
from transformer_core.sources.gpt2 import weights_file
assert catalog.entry("gpt2:small") is not None
before = weights_file(settings().places) is None
dl = downloads.start_gpt2()
seen = []
while not dl.wait(0.01):
    seen.append(dl.fraction)
print(json.dumps({"before": before, "status": dl.status, "error": str(dl.error), "done": dl.done,
                  "total": dl.total, "fraction": dl.fraction,
                  "after": weights_file(settings().places) is None}))
"""

OFFLINE = """
import json
from service import catalog
from transformer_core import trace_text, next_tokens
model, card = catalog.load("gpt2:small", "cpu")
prep, trace = trace_text(model, "Hello, my dog")
print(json.dumps({"heads": model.cfg.n_heads, "layers": model.cfg.n_layers, "encoding": card["encoding"],
                  "weights": list(trace.attention("dec_self", 0).weights.shape),
                  "top": len(next_tokens(model, "Hello", top=3))}))
"""


def test_gpt2_downloads_once_with_progress_then_loads_offline_from_the_cache(hub, tmp_path):
    env = {"HF_ENDPOINT": hub, "HF_HOME": str(tmp_path / "hf")}
    got = run_python(DOWNLOAD, env)
    assert got["before"] is True and got["status"] == "done", got
    size = len(FakeHub.files["model.safetensors"])
    assert got["done"] == got["total"] == size and got["fraction"] == 1.0 and got["after"] is False
    assert "GET /openai-community/gpt2/resolve/main/model.safetensors" in FakeHub.requests
    FakeHub.requests.clear()
    got = run_python(OFFLINE, env | {"HF_HUB_OFFLINE": "1"})
    assert got == {"heads": HEADS, "layers": 1, "encoding": "r50k_base", "weights": [1, HEADS, 4, 4], "top": 3}
    assert FakeHub.requests == []  # offline: nothing asked of the hub


def test_a_failed_download_is_a_clear_message(hub, tmp_path):
    FakeHub.files = {}  # the hub answers, but has no such file (a closed port would be retried for 25 s)
    env = {"HF_ENDPOINT": hub, "HF_HOME": str(tmp_path / "hf")}
    got = run_python(DOWNLOAD, env)
    assert got["status"] == "error" and "could not be downloaded" in got["error"]


HF_DOWNLOAD = """
import json, sys
from service import catalog, downloads
from transformer_core.errors import ModelSourceError
key = sys.argv[1] if len(sys.argv) > 1 else "hf:qwen2.5-0.5b"
try:
    catalog.load(key, "cpu")
    before = "loaded"
except ModelSourceError as exc:
    before = exc.code
dl = downloads.start(key)
dl.wait()
print(json.dumps({"before": before, "status": dl.status, "error": str(dl.error), "fraction": dl.fraction}))
"""

HF_OFFLINE = """
import json, sys
from service import catalog
from transformer_core import trace_text, next_tokens
from transformer_core.text.tokenizer import tokenize
model, card = catalog.load(sys.argv[1] if len(sys.argv) > 1 else "hf:qwen2.5-0.5b", "cpu")
prep, trace = trace_text(model, "我今天去超市 and the park 123")
stages = trace.attention("dec_self", 0)
print(json.dumps({"kv": model.cfg.kv_heads, "heads": model.cfg.n_heads, "encoding": card["encoding"],
                  "weights": list(stages.weights.shape), "k": list(stages.k.shape),
                  "q_normed": None if stages.q_normed is None else list(stages.q_normed.shape),
                  "ids": prep.src_ids[0].tolist()[:4], "top": len(next_tokens(model, "我", top=3))}))
"""


@pytest.mark.parametrize("ref, repo, tiny", [("qwen2.5-0.5b", "Qwen/Qwen2.5-0.5B", "qwen2-gqa-tied"),
                                              ("qwen3-0.6b", "Qwen/Qwen3-0.6B", "qwen3-gqa-tied-wide-heads")])
def test_a_modern_hub_model_downloads_with_progress_then_loads_offline_from_the_cache(hub, tmp_path, ref, repo, tiny):
    """Qwen2.5-0.5B's and Qwen3-0.6B's repositories stood in for by a tiny random model of the family with a
    trained byte-level tokenizer."""
    pytest.importorskip("transformers")
    pytest.importorskip("tokenizers")
    from harness.hf_models import save_tiny

    save_tiny(tmp_path / "tiny", tiny)
    FakeHub.repos = {repo: {f: (tmp_path / "tiny" / f).read_bytes()
                            for f in ("config.json", "model.safetensors", "tokenizer.json")}}
    env = {"HF_ENDPOINT": hub, "HF_HOME": str(tmp_path / "hf")}
    got = run_python(HF_DOWNLOAD, env, f"hf:{ref}")
    assert got == {"before": "hf_not_downloaded", "status": "done", "error": "None", "fraction": 1.0}, got
    assert f"GET /{repo}/resolve/main/tokenizer.json" in FakeHub.requests
    FakeHub.requests.clear()
    got = run_python(HF_OFFLINE, env | {"HF_HUB_OFFLINE": "1"}, f"hf:{ref}")
    T = got["weights"][-1]
    assert got["encoding"] == f"hf-{ref}" and got["top"] == 3 and (got["kv"], got["heads"]) == (2, 4)
    assert got["weights"] == [1, 4, T, T] and got["k"][:2] == [1, 2]
    assert got["q_normed"] == (None if ref.startswith("qwen2") else [1, 4, T, 16])  # Qwen3: 4 heads of 16 on 32
    assert FakeHub.requests == []


def test_a_failed_modern_download_names_the_model(hub, tmp_path):
    FakeHub.repos = {}
    got = run_python(HF_DOWNLOAD, {"HF_ENDPOINT": hub, "HF_HOME": str(tmp_path / "hf")})
    assert got["status"] == "error" and "Qwen2.5-0.5B could not be downloaded" in got["error"], got
