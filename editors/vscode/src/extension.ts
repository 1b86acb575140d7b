import * as vscode from "vscode";
import { LanguageClient, LanguageClientOptions, ServerOptions } from "vscode-languageclient/node";
import { documentSelector, interpreter, serverCommand } from "./server";

let client: LanguageClient | undefined;

// The interpreter the Python extension has selected for the workspace, when it is installed.
async function selectedInterpreter(): Promise<string | undefined> {
  const python = vscode.extensions.getExtension("ms-python.python");
  if (!python) {
    return undefined;
  }
  try {
    const api = python.isActive ? python.exports : await python.activate();
    const path = api?.environments?.getActiveEnvironmentPath?.(vscode.workspace.workspaceFolders?.[0]?.uri);
    if (path?.path) {
      const resolved = await api.environments.resolveEnvironment?.(path);
      return resolved?.executable?.uri?.fsPath ?? path.path;
    }
  } catch {
    // An older Python extension without the environments API: fall back to python3.
  }
  return undefined;
}

async function start(): Promise<void> {
  const configured = vscode.workspace.getConfiguration("amplint").get<string>("interpreter");
  const server = serverCommand(interpreter(configured, await selectedInterpreter()));
  const serverOptions: ServerOptions = { run: server, debug: server };
  const clientOptions: LanguageClientOptions = { documentSelector };
  client = new LanguageClient("amplint", "amplint", serverOptions, clientOptions);
  await client.start();
}

export async function activate(context: vscode.ExtensionContext): Promise<void> {
  context.subscriptions.push(
    vscode.workspace.onDidChangeConfiguration(async (event) => {
      if (event.affectsConfiguration("amplint.interpreter")) {
        await client?.stop();
        await start();
      }
    }),
  );
  await start();
}

export async function deactivate(): Promise<void> {
  await client?.stop();
}
