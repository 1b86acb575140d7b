// How the extension starts `amplint server`: kept free of the `vscode` module so that the test can
// start the server exactly as the extension does, under plain node.

export interface ServerCommand {
  command: string;
  args: string[];
}

// The interpreter that runs the server: the `amplint.interpreter` setting, else the one the Python
// extension has selected for the workspace, else `python3` from PATH.
export function interpreter(configured: string | undefined, selected: string | undefined): string {
  if (configured && configured.trim()) {
    return configured.trim();
  }
  if (selected && selected.trim()) {
    return selected.trim();
  }
  return "python3";
}

// `python -m amplint server` rather than the `amplint` script: the script need not be on PATH in a
// virtual environment VS Code did not activate.
export function serverCommand(python: string): ServerCommand {
  return { command: python, args: ["-m", "amplint", "server"] };
}

// Python files and the Python cells of Jupyter notebooks.
export const documentSelector = [
  { scheme: "file", language: "python" },
  { scheme: "untitled", language: "python" },
  { notebook: "jupyter-notebook", language: "python" },
];
