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
    for name in ("attention", "sampling"):
        js = loader(name)
        parts = json.loads(re.search(r"const parts = (\[.*?\]),", js).group(1))
        assert [p.split("?")[0] for p in parts] == ["common.js", f"{name}.js", f"{name}.css"]  # the CSS last
        assert '"app/static/views/" + p' in js
        for part in parts:
            path, version = part.split("?v=")
            assert version == hashlib.sha256((ROOT / "static" / "views" / path).read_bytes()).hexdigest()[:12]
        assert len(js.encode()) < 1_200 < len(source(name).encode()) / 10  # the element carries the loader only
