#!/usr/bin/env bash
# N identical Streamlit replicas on localhost behind nginx (deploy/nginx.conf), as the current user.
#
#   deploy/run_local.sh [N=2]        then open http://localhost:8600 ; Ctrl-C stops everything
#
# Environment: PORT (nginx, default 8600), BASE_PORT (first replica, default 8601; replica i uses
# BASE_PORT+i), HOST (nginx address, default 127.0.0.1; 0.0.0.0 to serve a room), WORKDIR (nginx config,
# pid, temp files and all logs; default a new temp dir), NGINX (binary, default nginx on PATH or
# /usr/sbin/nginx), PYTHON (default python3), OMP_NUM_THREADS (torch threads per replica, default
# cores / N), TRANSFORMER_EXPLORER_DEVICE (cpu/cuda, passed to replicas).
# nginx runs in the foreground of this script with its own prefix - no system service, no root needed.
set -euo pipefail
cd "$(dirname "$0")/.."

N=${1:-2}
PORT=${PORT:-8600}
BASE_PORT=${BASE_PORT:-8601}
HOST=${HOST:-127.0.0.1}
PYTHON=${PYTHON:-python3}
NGINX=${NGINX:-$(command -v nginx || echo /usr/sbin/nginx)}
WORKDIR=${WORKDIR:-$(mktemp -d -t transformer-explorer-deploy-XXXXXX)}
mkdir -p "$WORKDIR/logs" "$WORKDIR/tmp"
[ -x "$NGINX" ] || { echo "nginx not found (scripts/install_nginx.sh installs it)" >&2; exit 1; }

# Replicas share one cookie secret, so a browser that moves to another replica (one was restarted)
# still passes Streamlit's XSRF check on uploads.
export STREAMLIT_SERVER_COOKIE_SECRET=${STREAMLIT_SERVER_COOKIE_SECRET:-$("$PYTHON" -c 'import secrets; print(secrets.token_hex(24))')}
# Each replica's torch uses its share of the cores (N processes x all cores would thrash).
threads=$(( $(nproc) / N )); [ "$threads" -ge 1 ] || threads=1
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-$threads}
SHARED_CACHE=../shared/tiktoken-cache
if [ -z "${TIKTOKEN_CACHE_DIR:-}" ] && [ -d "$SHARED_CACHE" ]; then  # offline tiktoken (a writable copy)
    cp -r "$SHARED_CACHE" "$WORKDIR/tiktoken-cache" && export TIKTOKEN_CACHE_DIR="$WORKDIR/tiktoken-cache"
fi

pids=()
cleanup() {
    trap - EXIT INT TERM
    for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
    for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
    echo "stopped; logs in $WORKDIR/logs"
}
trap cleanup EXIT INT TERM

servers=""
for ((i = 0; i < N; i++)); do
    p=$((BASE_PORT + i))
    "$PYTHON" -m streamlit run app.py --server.port "$p" --server.address 127.0.0.1 --server.headless true \
        --server.fileWatcherType none --browser.gatherUsageStats false >"$WORKDIR/logs/replica-$p.log" 2>&1 &
    pids+=($!)
    servers+="    server 127.0.0.1:$p max_fails=3 fail_timeout=10s;"$'\n'
done

# deploy/nginx.conf with this run's port, replicas and log path; then a main config around it
awk -v servers="$servers" '
    /# replicas:begin/ { print; printf "%s", servers; skip = 1; next }
    /# replicas:end/   { skip = 0 }
    !skip' deploy/nginx.conf |
    sed -e "s|^\(\s*\)listen 80;|\1listen $HOST:$PORT;|" \
        -e "s|access_log /var/log/nginx/transformer-explorer.access.log|access_log $WORKDIR/logs/access.log|" \
    >"$WORKDIR/site.conf"
user_line=""
[ "$(id -u)" -eq 0 ] && user_line="user root;"  # workers keep the current user (they write the temp dir)
cat >"$WORKDIR/nginx.conf" <<EOF
$user_line
worker_processes 1;
pid $WORKDIR/nginx.pid;
error_log $WORKDIR/logs/error.log warn;
events { worker_connections 1024; }
http {
    client_body_temp_path $WORKDIR/tmp/client_body;
    proxy_temp_path $WORKDIR/tmp/proxy;
    fastcgi_temp_path $WORKDIR/tmp/fastcgi;
    uwsgi_temp_path $WORKDIR/tmp/uwsgi;
    scgi_temp_path $WORKDIR/tmp/scgi;
    include $WORKDIR/site.conf;
}
EOF
"$NGINX" -q -t -p "$WORKDIR" -e "$WORKDIR/logs/error.log" -c "$WORKDIR/nginx.conf"

for ((i = 0; i < N; i++)); do  # wait for every replica's health check
    p=$((BASE_PORT + i))
    up=""
    for _ in $(seq 1 240); do
        if "$PYTHON" -c "import urllib.request as u; u.urlopen('http://127.0.0.1:$p/_stcore/health', timeout=2)" \
            2>/dev/null; then up=1; break; fi
        kill -0 "${pids[$i]}" 2>/dev/null || break
        sleep 0.5
    done
    [ -n "$up" ] || { echo "replica on port $p did not come up:" >&2; tail -20 "$WORKDIR/logs/replica-$p.log" >&2; exit 1; }
done

"$NGINX" -p "$WORKDIR" -e "$WORKDIR/logs/error.log" -c "$WORKDIR/nginx.conf" -g "daemon off;" &
pids+=($!)
echo "ready: http://$HOST:$PORT -> $N replicas on ports $BASE_PORT..$((BASE_PORT + N - 1)); logs in $WORKDIR/logs"
wait -n "${pids[@]}" || true  # returns when any replica or nginx exits (or on Ctrl-C); cleanup stops the rest
