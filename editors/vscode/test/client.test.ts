// The extension's way of starting the server, run under plain node: the real `amplint server`
// (from the interpreter in AMPLINT_PYTHON, as the `amplint.interpreter` setting would name it,
// else python3) speaks LSP over stdio with vscode-languageclient's own protocol library.
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { test } from "node:test";
import { pathToFileURL } from "node:url";
import {
  createProtocolConnection,
  DidOpenTextDocumentNotification,
  ExitNotification,
  InitializedNotification,
  InitializeRequest,
  PublishDiagnosticsNotification,
  PublishDiagnosticsParams,
  ShutdownRequest,
  StreamMessageReader,
  StreamMessageWriter,
} from "vscode-languageserver-protocol/node";
import { documentSelector, interpreter, serverCommand } from "../src/server";

const HAZARD = "import torch\n\n\ndef make_scaler():\n    s = torch.cuda.amp.GradScaler()\n    return s\n";

test("the interpreter: the setting, else the Python extension's, else python3", () => {
  assert.equal(interpreter(" /opt/py/bin/python ", "/venv/bin/python"), "/opt/py/bin/python");
  assert.equal(interpreter("", "/venv/bin/python"), "/venv/bin/python");
  assert.equal(interpreter(undefined, undefined), "python3");
  assert.deepEqual(serverCommand("/venv/bin/python"), { command: "/venv/bin/python", args: ["-m", "amplint", "server"] });
  assert.ok(documentSelector.some((filter) => "notebook" in filter));
});

test("the server the extension starts publishes amplint's diagnostics for a hazardous file", async () => {
  const folder = mkdtempSync(join(tmpdir(), "amplint-vscode-"));
  const { command, args } = serverCommand(interpreter(process.env.AMPLINT_PYTHON, undefined));
  const server = spawn(command, args, { cwd: folder, stdio: ["pipe", "pipe", "inherit"] });
  const exited = new Promise<number | null>((resolve) => server.on("exit", resolve));
  const connection = createProtocolConnection(
    new StreamMessageReader(server.stdout),
    new StreamMessageWriter(server.stdin),
  );
  const published = new Promise<PublishDiagnosticsParams>((resolve) =>
    connection.onNotification(PublishDiagnosticsNotification.type, resolve),
  );
  connection.listen();
  const uri = pathToFileURL(join(folder, "model.py")).href;
  const initialized = await connection.sendRequest(InitializeRequest.type, {
    processId: process.pid,
    rootUri: pathToFileURL(folder).href,
    capabilities: {},
  });
  assert.equal(initialized.serverInfo?.name, "amplint");
  await connection.sendNotification(InitializedNotification.type, {});
  await connection.sendNotification(DidOpenTextDocumentNotification.type, {
    textDocument: { uri, languageId: "python", version: 1, text: HAZARD },
  });
  const params = await published;
  assert.equal(params.uri, uri);
  assert.equal(params.diagnostics.length, 1);
  const [diagnostic] = params.diagnostics;
  assert.equal(diagnostic.code, "AMP008");
  assert.deepEqual(diagnostic.range.start, { line: 4, character: 8 });
  assert.match(diagnostic.codeDescription?.href ?? "", /\/docs\/rules\/AMP008\.md$/);
  await connection.sendRequest(ShutdownRequest.type);
  await connection.sendNotification(ExitNotification.type);
  assert.equal(await exited, 0);
  connection.dispose();
});
