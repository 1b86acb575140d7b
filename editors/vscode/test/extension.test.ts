// The extension itself, activated under plain node: `vscode` is the stub beside this file (there is
// no VS Code binary here); vscode-languageclient, the server it starts (from AMPLINT_PYTHON, as the
// `amplint.interpreter` setting would name it, else python3) and the protocol are real.
import assert from "node:assert/strict";
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { test } from "node:test";
import Module from "node:module";

const stubPath = require.resolve("./vscode-stub");
const resolve = (Module as any)._resolveFilename;
(Module as any)._resolveFilename = function (request: string, ...rest: unknown[]) {
  return request === "vscode" ? stubPath : resolve.call(this, request, ...rest);
};

// eslint-disable-next-line @typescript-eslint/no-require-imports
const vscode = require("./vscode-stub");
// eslint-disable-next-line @typescript-eslint/no-require-imports
const extension = require("../src/extension");

const HAZARD = "import torch\n\n\ndef make_scaler():\n    s = torch.cuda.amp.GradScaler()\n    return s\n";

// The timeout is a guard only: the test takes seconds.
test("the extension starts amplint server and shows its diagnostics for a hazardous file", { timeout: 120_000 }, async () => {
  const folder = mkdtempSync(join(tmpdir(), "amplint-extension-"));
  const uri = vscode.Uri.file(join(folder, "model.py"));
  vscode.state.documents.push(vscode.textDocument(uri, "python", HAZARD));
  if (process.env.AMPLINT_PYTHON) {
    vscode.state.settings["amplint.interpreter"] = process.env.AMPLINT_PYTHON;
  }
  const shown = new Promise<void>((resolve) => {
    vscode.state.published.event((published: string) => {
      if (published === uri.toString()) resolve();
    });
  });
  await extension.activate({ subscriptions: [] });
  await shown;
  const [diagnostic, ...others] = vscode.state.diagnostics.get(uri.toString());
  assert.equal(others.length, 0);
  assert.equal(diagnostic.code.value, "AMP008");
  assert.match(diagnostic.code.target.toString(), /\/docs\/rules\/AMP008\.md$/);
  assert.equal(diagnostic.source, "amplint");
  assert.equal(diagnostic.severity, vscode.DiagnosticSeverity.Information);
  assert.deepEqual([diagnostic.range.start.line, diagnostic.range.start.character], [4, 8]);
  await extension.deactivate();
});
