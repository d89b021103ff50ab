#!/usr/bin/env bash
# Debian packages the project needs outside Python: Pango for WeasyPrint (PDF reports),
# poppler for pdftotext/pdfinfo/pdftoppm in tests, and a small TeX Live (pdflatex with amsmath) to compile
# the .tex output and the `symbolic latex` snippets (tests/test_latex_paper.py needs it; CI has it).
# Installs only what is missing; needs root (or sudo) the first time.
set -euo pipefail
need=()
have() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"; }
for pkg in libpango-1.0-0 libpangoft2-1.0-0 libharfbuzz-subset0 fonts-dejavu-core fonts-stix poppler-utils \
           texlive-latex-base texlive-latex-recommended; do
  have "$pkg" || need+=("$pkg")
done
[ ${#need[@]} -eq 0 ] && exit 0
if ! command -v apt-get >/dev/null; then
  echo "system-deps: not a Debian system; install the equivalents of: ${need[*]}" >&2
  exit 0
fi
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
echo "system-deps: installing ${need[*]}"
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
