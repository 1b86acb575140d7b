// How the extension chooses the interpreter and the command that starts the server.
import assert from "node:assert/strict";
import { test } from "node:test";
import { documentSelector, interpreter, serverCommand } from "../src/server";

test("the interpreter: the setting, else the Python extension's, else python3", () => {
  assert.equal(interpreter(" /opt/py/bin/python ", "/venv/bin/python"), "/opt/py/bin/python");
  assert.equal(interpreter("", "/venv/bin/python"), "/venv/bin/python");
  assert.equal(interpreter(undefined, undefined), "python3");
  assert.deepEqual(serverCommand("/venv/bin/python"), { command: "/venv/bin/python", args: ["-m", "amplint", "server"] });
  assert.ok(documentSelector.some((filter) => "notebook" in filter));
});
