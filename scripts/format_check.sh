#!/usr/bin/env bash
# Checks that the project's C++ and CUDA sources (every tracked *.cpp, *.hpp,
# *.cu, *.cuh, *.h but the fuzz corpus) are formatted by clang-format 14 with
# the top-level .clang-format. Prints the files that are not and exits 1 when
# there are any (scripts/test.sh reports it as one summary line).
#   bash scripts/format_check.sh          check (clang-format --dry-run --Werror)
#   bash scripts/format_check.sh --fix    reformat those files in place
# Only version 14 (Debian 12's clang-format) is accepted: other versions format
# some constructs differently. Environment: CLANG_FORMAT (the binary to use).
set -euo pipefail
cd "$(dirname "$0")/.."

fix=0
case "${1:-}" in
  "") ;;
  --fix) fix=1 ;;
  *) echo "usage: $0 [--fix]" >&2; exit 2 ;;
esac

find_clang_format() {
  local c
  for c in ${CLANG_FORMAT:-} clang-format-14 clang-format; do
    if command -v "$c" >/dev/null 2>&1 && "$c" --version | grep -q 'version 14\.'; then
      echo "$c"
      return 0
    fi
  done
  return 1
}
cf=$(find_clang_format) || { bash scripts/install_deps.sh >&2 && cf=$(find_clang_format); } || {
  echo "format_check: no clang-format 14 found (Debian 12: apt-get install clang-format)" >&2
  exit 2
}
[ -f .clang-format ] || { echo "format_check: no .clang-format at the top of the tree" >&2; exit 2; }

# Tracked sources only: build folders and generated headers are never tracked.
mapfile -t files < <(git ls-files -- '*.cpp' '*.hpp' '*.cu' '*.cuh' '*.h' \
                       ':(exclude)tests/fuzz/corpus')
[ ${#files[@]} -gt 0 ] || { echo "format_check: no sources found (not a git checkout?)" >&2; exit 2; }

bad=()
for f in "${files[@]}"; do
  # --dry-run --Werror: one error per place that would change, exit status 1.
  if ! msg=$("$cf" --dry-run --Werror "$f" 2>&1); then
    bad+=("$f")
    n=$(grep -c 'code should be clang-formatted' <<<"$msg" || true)
    case "$n" in
      0) echo "  $f: $(head -1 <<<"$msg")" ;;  # clang-format failed otherwise
      1) echo "  $f (1 place)" ;;
      *) echo "  $f ($n places)" ;;
    esac
  fi
done

version=$("$cf" --version | grep -o 'version [0-9.]*')
if [ ${#bad[@]} -eq 0 ]; then
  echo "format_check: all ${#files[@]} files formatted (clang-format $version)"
  exit 0
fi
if [ "$fix" -eq 1 ]; then
  "$cf" -i "${bad[@]}"
  echo "format_check: reformatted ${#bad[@]} of ${#files[@]} files (clang-format $version)"
  exit 0
fi
echo "format_check: ${#bad[@]} of ${#files[@]} files not formatted (clang-format $version;" \
     "fix: bash scripts/format_check.sh --fix)"
exit 1
