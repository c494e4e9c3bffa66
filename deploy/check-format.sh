#!/usr/bin/env bash
# Fails, listing the files, when a tracked C++ file differs from what
# clang-format-14 makes of it with the repository's .clang-format.
# Fix with: git ls-files '*.cc' '*.h' | xargs clang-format-14 -i
set -euo pipefail
cd "$(dirname "$0")/.."

bad=()
while IFS= read -r f; do
  [ -f "$f" ] || continue
  if ! clang-format-14 --style=file "$f" | cmp -s - "$f"; then bad+=("$f"); fi
done < <(git ls-files '*.cc' '*.h')
if [ ${#bad[@]} -ne 0 ]; then
  echo "check-format: ${#bad[@]} file(s) differ from clang-format-14:" >&2
  printf '  %s\n' "${bad[@]}" >&2
  echo "fix: git ls-files '*.cc' '*.h' | xargs clang-format-14 -i" >&2
  exit 1
fi
echo "check-format: every C++ file is formatted"
