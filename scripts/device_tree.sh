#!/usr/bin/env bash
# What a call to a GPU machine sends: the tracked files, the untracked ones git does not ignore and the paths the call
# carries, at most 64 MiB in all. The shipped models alone are more than that (assets/models), so a call that needs
# only some of them leaves the others out of git's index for the call and puts them back after (the files stay):
#   bash scripts/device_tree.sh size [CARRIED...]   what would travel, in MiB (e.g. size .corpora)
#   bash scripts/device_tree.sh slim [KEEP...]      leave out every shipped model but KEEP (e.g. slim everyday-gpt)
#   ... the call ...
#   bash scripts/device_tree.sh restore             git's index and .git/info/exclude as they were
#   bash scripts/device_tree.sh list [CARRIED...]   the files that would travel, one per line
# Commit nothing between slim and restore: the models left out would be committed as deleted.
set -euo pipefail
cd "$(dirname "$0")/.."
exclude=$(git rev-parse --git-path info/exclude)
mark="# left out by scripts/device_tree.sh slim"
limit=$((64 * 1024 * 1024))

travels() {  # the tracked files and the untracked ones git does not ignore (those on disk), then the carried paths
  { git ls-files -z; git ls-files -z -o --exclude-standard; } | while IFS= read -r -d '' f; do
    [ -f "$f" ] && printf '%s\n' "$f"
  done
  for c in "$@"; do [ -e "$c" ] && find "$c" -type f; done
  return 0
}

case "${1:-}" in
  list)
    shift
    travels "$@"
    ;;
  size)
    shift
    bytes=$(travels "$@" | tr '\n' '\0' | xargs -0 -r stat -c %s | awk '{s += $1} END {print s + 0}')
    awk -v b="$bytes" -v l="$limit" 'BEGIN {
      printf "%.1f MiB would travel (the limit is 64 MiB): %s\n", b / 1048576, (b <= l ? "fits" : "too large") }'
    [ "$bytes" -le "$limit" ]
    ;;
  slim)
    shift
    if grep -qxF "$mark" "$exclude" 2>/dev/null; then
      echo "already slim: run 'bash scripts/device_tree.sh restore' first" >&2; exit 1
    fi
    if ! git diff --cached --quiet -- assets/models; then
      echo "changes to assets/models are staged: commit or unstage them first" >&2; exit 1
    fi
    mkdir -p "$(dirname "$exclude")"
    echo "$mark" >> "$exclude"
    for d in assets/models/*/; do
      name=$(basename "$d")
      case " $* " in *" $name "*) continue ;; esac
      git rm -r -q --cached --ignore-unmatch "assets/models/$name"
      echo "/assets/models/$name/" >> "$exclude"
    done
    echo "$mark (end)" >> "$exclude"
    echo "left out of the call: every shipped model but ${*:-none}; restore with 'bash scripts/device_tree.sh restore'"
    ;;
  restore)
    if ! grep -qxF "$mark" "$exclude" 2>/dev/null; then
      echo "not slim: nothing to restore"; exit 0  # (a reset here would unstage what is staged under assets/models)
    fi
    git reset -q HEAD -- assets/models
    awk -v m="$mark" '$0 == m {skip = 1} !skip {print} $0 == m " (end)" {skip = 0}' "$exclude" > "$exclude.new"
    mv "$exclude.new" "$exclude"
    echo "git's index and .git/info/exclude are as they were"
    ;;
  *)
    sed -n '2,10p' "$0" >&2; exit 2
    ;;
esac
