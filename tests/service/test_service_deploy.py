"""Scale past one server: deploy/Dockerfile and deploy/compose.yaml. Docker cannot run where these tests run (no
engine), so they check the files' structure, and run nginx's part of the compose script on deploy/nginx.conf;
deploy/run_local.sh and bench/deploy_check.py run the same topology without containers."""
import re
import shutil
import subprocess
import tomllib
from pathlib import Path

import pytest

yaml = pytest.importorskip("yaml")

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
COMPOSE = yaml.safe_load((DEPLOY / "compose.yaml").read_text(encoding="utf-8"))
DOCKERFILE = (DEPLOY / "Dockerfile").read_text(encoding="utf-8")
APPS = sorted(n for n in COMPOSE["services"] if n != "nginx")


def instructions(text: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) of a Dockerfile, continuation lines joined, comments dropped."""
    lines = [line for line in text.splitlines() if not line.lstrip().startswith("#")]
    joined = re.sub(r"\\\n", " ", "\n".join(lines))
    return [(m.group(1).upper(), m.group(2).strip()) for m in re.finditer(r"^(\w+)\s+(.*)$", joined, flags=re.M)]


def test_the_dockerfile_builds_a_slim_cpu_non_root_image_with_a_health_check():
    steps = instructions(DOCKERFILE)
    assert steps[0] == ("FROM", "python:3.11-slim")
    runs = " ".join(args for op, args in steps if op == "RUN")
    pin = next(line for line in (ROOT / "requirements.txt").read_text().splitlines() if line.startswith("torch=="))
    assert "grep -E '^torch==' requirements.txt" in runs and pin == "torch==2.13.0"  # the pin is read, not copied
    assert "--index-url https://download.pytorch.org/whl/cpu" in runs and "pip install -r requirements.txt" in runs
    user = [args for op, args in steps if op == "USER"]
    assert user and user[-1] not in ("root", "0") and "useradd" in runs
    assert [op for op, _ in steps].index("USER") > [op for op, _ in steps].index("COPY")  # files owned by root
    health = next(args for op, args in steps if op == "HEALTHCHECK")
    assert "/_stcore/health" in health and "8501" in health
    cmd = next(args for op, args in steps if op == "CMD")
    assert '"streamlit", "run", "app.py"' in cmd and '"8501"' in cmd
    env = " ".join(args for op, args in steps if op == "ENV")
    assert "TRANSFORMER_EXPLORER_CHECKPOINTS=/data/checkpoints" in env
    ignored = (DEPLOY / "Dockerfile.dockerignore").read_text().split()
    assert {"checkpoints", ".git"} <= set(ignored)


def test_compose_runs_replicas_of_one_image_sharing_one_checkpoints_volume():
    assert len(APPS) >= 2
    apps = [COMPOSE["services"][n] for n in APPS]
    assert all(a == apps[0] for a in apps)  # identical replicas (one YAML anchor)
    app = apps[0]
    assert app["build"] == {"context": "..", "dockerfile": "deploy/Dockerfile"}
    env = app["environment"]
    mount = env["TRANSFORMER_EXPLORER_CHECKPOINTS"]
    volume = next(v.split(":")[0] for v in app["volumes"] if v.split(":")[1] == mount)
    assert volume in COMPOSE["volumes"]  # a named volume, the same for every replica
    assert env["STREAMLIT_SERVER_COOKIE_SECRET"].startswith("${COOKIE_SECRET:?")  # one secret, required
    assert "TRANSFORMER_EXPLORER_MEMORY_BUDGET_MB" in env and "mem_limit" in app
    assert app["restart"] == "unless-stopped" and "8501" in map(str, app["expose"])


def test_compose_nginx_waits_for_healthy_replicas_and_uses_the_shared_config():
    nginx = COMPOSE["services"]["nginx"]
    assert nginx["depends_on"] == {n: {"condition": "service_healthy"} for n in APPS}
    assert nginx["environment"]["REPLICAS"].split() == APPS
    assert "./nginx.conf:/etc/transformer-explorer/nginx.conf:ro" in nginx["volumes"]
    assert any(p.endswith(":80") for p in nginx["ports"])


def nginx_site(tmp_path: Path) -> str:
    """Run the compose nginx script (compose's $$ unescaped, paths moved into tmp_path) up to starting nginx."""
    script = COMPOSE["services"]["nginx"]["command"][0].replace("$$", "$")
    script = script.replace("/etc/transformer-explorer/nginx.conf", str(DEPLOY / "nginx.conf"))
    script = script.replace("/tmp/replicas.conf", str(tmp_path / "replicas.conf"))
    script = script.replace("/etc/nginx/conf.d/default.conf", str(tmp_path / "site.conf"))
    script = script.split("nginx -t -q")[0]
    env = {"REPLICAS": COMPOSE["services"]["nginx"]["environment"]["REPLICAS"], "PATH": "/usr/bin:/bin"}
    subprocess.run(["sh", "-c", script], check=True, env=env, timeout=30)
    return (tmp_path / "site.conf").read_text()


@pytest.mark.skipif(shutil.which("awk") is None or shutil.which("sh") is None, reason="needs sh and awk")
def test_the_compose_nginx_config_lists_every_replica_with_sticky_hashing(tmp_path):
    site = nginx_site(tmp_path)
    upstream = site.split("upstream transformer_explorer {", 1)[1].split("}", 1)[0]
    assert re.findall(r"server (\S+) max_fails", upstream) == [f"{n}:8501" for n in APPS]
    assert "hash $te_sticky_key consistent;" in upstream and "127.0.0.1" not in upstream
    assert "access_log /dev/stdout te_upstream;" in site
    upload_mb = tomllib.loads((ROOT / ".streamlit" / "config.toml").read_text())["server"]["maxUploadSize"]
    assert f"client_max_body_size {upload_mb}m;" in site


@pytest.mark.skipif(shutil.which("nginx") is None and not Path("/usr/sbin/nginx").exists(), reason="needs nginx")
def test_the_compose_nginx_config_is_valid_nginx(tmp_path):
    site = nginx_site(tmp_path).replace("listen 80;", "listen 127.0.0.1:18600;")
    for name in (f"{n}:8501" for n in APPS):
        site = site.replace(f"server {name}", "server 127.0.0.1:8501")  # no DNS for app1.. here
    (tmp_path / "site.conf").write_text(site)
    (tmp_path / "nginx.conf").write_text(
        f"pid {tmp_path}/nginx.pid; error_log {tmp_path}/error.log; events {{}} http {{ "
        f"client_body_temp_path {tmp_path}/cb; proxy_temp_path {tmp_path}/px; fastcgi_temp_path {tmp_path}/fc; "
        f"uwsgi_temp_path {tmp_path}/uw; scgi_temp_path {tmp_path}/sc; include {tmp_path}/site.conf; }}")
    binary = shutil.which("nginx") or "/usr/sbin/nginx"
    out = subprocess.run([binary, "-t", "-p", str(tmp_path), "-e", str(tmp_path / "error.log"), "-c",
                          str(tmp_path / "nginx.conf")], capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr


REPLICA_SCRIPT = r"""
import sys
from pathlib import Path
from service import uploads
print(uploads.import_model(Path(sys.argv[1]).read_bytes(), "m.safetensors", "made on replica A", owner=sys.argv[2]))
"""


def test_a_model_saved_by_one_replica_is_opened_by_another_for_its_owner_only(tmp_path, user_dir):
    """Two server processes sharing one checkpoints folder (the compose volume; run_local.sh's shared checkout)."""
    import os
    import sys

    from harness.model_files import exported
    from service import catalog

    owner = catalog.new_token()
    (tmp_path / "m.safetensors").write_bytes(exported(tmp_path))
    env = {**os.environ, "TRANSFORMER_EXPLORER_CHECKPOINTS": str(user_dir), "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-c", REPLICA_SCRIPT, str(tmp_path / "m.safetensors"), owner],
                         capture_output=True, text=True, env=env, timeout=120, cwd=ROOT)
    assert out.returncode == 0, out.stderr[-2000:]
    key = out.stdout.split()[-1]
    catalog.refresh()  # replica B's listing (it re-reads the folder every LIST_TTL_S seconds anyway)
    assert catalog.entry(key, owner).label == "made on replica A" and catalog.entry(key, catalog.new_token()) is None
    model, _ = catalog.load(key, "cpu", viewer=owner)
    assert model.cfg.d_model == 16
