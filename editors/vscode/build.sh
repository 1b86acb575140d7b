#!/usr/bin/env bash
# Build, test and package the extension: amplint.vsix in this folder. The test starts the real
# server: AMPLINT_PYTHON names an interpreter with amplint[lsp] installed (python3 by default).
set -euo pipefail
cd "$(dirname "$0")"
npm ci --no-audit --no-fund
npm run compile
npm test
npx vsce package --out amplint.vsix
