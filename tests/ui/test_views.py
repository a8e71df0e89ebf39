"""ui/views.py: a view's element carries a loader of a few lines; its scripts are static/views' files, which the
server serves (Streamlit's static serving) and whose addresses change with their text."""
import hashlib
import json
import re
import tomllib

from harness.server import ROOT
from ui.views import loader, source


def test_static_serving_is_on():
    config = tomllib.loads((ROOT / ".streamlit" / "config.toml").read_text(encoding="utf-8"))
    assert config["server"]["enableStaticServing"] is True


def test_a_views_loader_names_its_scripts_by_their_text():
    """Its scripts and CSS, fetched at addresses that carry a hash of their text (a changed file is fetched anew)."""
    for name in ("attention", "sampling"):
        js = loader(name)
        parts = json.loads(re.search(r"const parts = (\[.*?\]),", js).group(1))
        assert parts == ["common.js", f"{name}.js", f"{name}.css"]  # the CSS last
        assert "fetch(`app/static/views/${p}?v=${v}`)" in js
        files = b"".join((ROOT / "static" / "views" / p).read_bytes() for p in parts)
        assert re.search(r'v = "(\w+)"', js).group(1) == hashlib.sha256(files).hexdigest()[:10]
        assert len(js.encode()) < 1_000 < len(source(name).encode()) / 10  # the element carries the loader only
