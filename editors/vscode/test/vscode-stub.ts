// The part of the `vscode` API that vscode-languageclient and the extension touch when a client
// starts, opens a document and receives diagnostics, with no VS Code binary: real values where the
// test reads them (documents, settings, the diagnostic collection, the classes diagnostics are made
// of), and an inert stand-in (callable, constructible, iterable, disposable) for the rest.
/* eslint-disable @typescript-eslint/no-explicit-any */
import { fileURLToPath, pathToFileURL } from "node:url";

function inert(): any {
  const target = function () {};
  return new Proxy(target, {
    get(_, key) {
      if (key === Symbol.iterator) return function* () {};
      if (key === Symbol.toPrimitive) return () => 0;
      if (key === "then") return undefined; // not a promise
      if (key === "length") return 0;
      if (key === "dispose") return () => undefined;
      return inert();
    },
    apply: () => inert(),
    construct: () => inert(),
  });
}

export class Uri {
  private constructor(readonly scheme: string, readonly text: string) {}
  static parse(text: string): Uri {
    return new Uri(text.slice(0, text.indexOf(":")), text);
  }
  static file(path: string): Uri {
    return new Uri("file", pathToFileURL(path).href);
  }
  get fsPath(): string {
    return fileURLToPath(this.text);
  }
  get path(): string {
    return new URL(this.text).pathname;
  }
  toString(): string {
    return this.text;
  }
  toJSON(): string {
    return this.text;
  }
}

export class Disposable {
  constructor(private readonly done: () => void = () => undefined) {}
  static from(...items: { dispose(): unknown }[]): Disposable {
    return new Disposable(() => items.forEach((item) => item.dispose()));
  }
  dispose(): void {
    this.done();
  }
}

export class EventEmitter<T> {
  private listeners: ((value: T) => void)[] = [];
  event = (listener: (value: T) => void): Disposable => {
    this.listeners.push(listener);
    return new Disposable(() => (this.listeners = this.listeners.filter((l) => l !== listener)));
  };
  fire(value: T): void {
    this.listeners.forEach((listener) => listener(value));
  }
  dispose(): void {
    this.listeners = [];
  }
}

export class Position {
  constructor(readonly line: number, readonly character: number) {}
}

export class Range {
  readonly start: Position;
  readonly end: Position;
  constructor(a: any, b: any, c?: number, d?: number) {
    [this.start, this.end] = c === undefined ? [a, b] : [new Position(a, b), new Position(c, d as number)];
  }
}

export enum DiagnosticSeverity {
  Error = 0,
  Warning = 1,
  Information = 2,
  Hint = 3,
}

export class Diagnostic {
  code?: any;
  source?: string;
  constructor(readonly range: Range, readonly message: string, readonly severity?: DiagnosticSeverity) {}
}

export class CancellationError extends Error {}

export class CancellationTokenSource {
  token = { isCancellationRequested: false, onCancellationRequested: new EventEmitter<void>().event };
  cancel(): void {
    this.token.isCancellationRequested = true;
  }
  dispose(): void {}
}

export const version = "1.82.0";

// What the test sets and reads.
export const state = {
  documents: [] as any[],
  settings: {} as Record<string, unknown>,
  diagnostics: new Map<string, Diagnostic[]>(),
  published: new EventEmitter<string>(),
};

export function textDocument(uri: Uri, languageId: string, text: string): any {
  return { uri, languageId, version: 1, isClosed: false, getText: () => text, fileName: uri.fsPath };
}

const configuration = (section?: string): any => ({
  get: (key: string, fallback?: unknown) => state.settings[section ? `${section}.${key}` : key] ?? fallback,
  has: () => false,
  inspect: () => undefined,
  update: async () => undefined,
});

export const workspace = new Proxy(
  {
    get textDocuments() {
      return state.documents;
    },
    notebookDocuments: [],
    workspaceFolders: undefined,
    getConfiguration: configuration,
  } as any,
  { get: (target, key) => (key in target ? target[key] : inert()) },
);

export const languages = new Proxy(
  {
    // Enough of VS Code's matching for this test: a filter of the document's language and scheme.
    match: (selector: any, document: any): number =>
      (Array.isArray(selector) ? selector : [selector]).some(
        (filter: any) =>
          !filter.notebook &&
          (filter.language === undefined || filter.language === document.languageId) &&
          (filter.scheme === undefined || filter.scheme === document.uri.scheme),
      )
        ? 10
        : 0,
    createDiagnosticCollection: () => ({
      set: (uri: Uri, diagnostics: Diagnostic[]) => {
        state.diagnostics.set(uri.toString(), diagnostics);
        state.published.fire(uri.toString());
      },
      delete: (uri: Uri) => state.diagnostics.delete(uri.toString()),
      clear: () => state.diagnostics.clear(),
      dispose: () => undefined,
    }),
  } as any,
  { get: (target, key) => (key in target ? target[key] : inert()) },
);

export const extensions = { getExtension: () => undefined };

const rest = inert();
export const window = rest;
export const commands = rest;
export const env = new Proxy({ appName: "node (vscode stub)", language: "en" } as any, {
  get: (target, key) => (key in target ? target[key] : inert()),
});
export const TabInputText = class {};
export const TabInputTextDiff = class {};
export const TabInputCustom = class {};
export const TabInputNotebook = class {};
export const ProgressLocation = { Window: 10, Notification: 15 };

// Every other name (the classes vscode-languageclient extends as it loads, the enums it reads) is
// the inert stand-in.
module.exports = new Proxy(exports, { get: (target: any, key) => (key in target ? target[key] : inert()) });
