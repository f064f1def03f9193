// A stand-in for the `vscode` module, enough for dist/extension.js and vscode-languageclient to
// activate under plain Node (VS Code itself cannot be downloaded in CI). Everything the tests look
// at is recorded: status bar texts, notifications, registered providers and commands. APIs the
// extension does not use resolve to inert proxies. The language server is the real one.
'use strict';

const Module = require('node:module');

class Disposable {
    constructor(fn) {
        this.fn = fn;
    }
    dispose() {
        this.fn?.();
        this.fn = undefined;
    }
    static from(...items) {
        return new Disposable(() => items.forEach((d) => d?.dispose?.()));
    }
}

class EventEmitter {
    constructor() {
        this.listeners = new Set();
        this.event = (listener) => {
            this.listeners.add(listener);
            return new Disposable(() => this.listeners.delete(listener));
        };
    }
    fire(value) {
        for (const listener of [...this.listeners]) listener(value);
    }
    dispose() {
        this.listeners.clear();
    }
}

class Position {
    constructor(line, character) {
        this.line = line;
        this.character = character;
    }
}

class Range {
    constructor(a, b, c, d) {
        [this.start, this.end] = typeof a === 'number' ? [new Position(a, b), new Position(c, d)] : [a, b];
    }
}

function uri(fsPath) {
    return { scheme: 'file', fsPath, path: fsPath, toString: () => `file://${fsPath}` };
}

/** An object whose every property is a callable proxy: for APIs nobody looks at. */
function inert(name) {
    return new Proxy(function () {}, {
        get: (_target, key) => {
            if (key === 'then') return undefined; // not a promise
            if (key === Symbol.iterator) return function* () {};
            if (key === Symbol.toPrimitive) return () => name;
            return inert(`${name}.${String(key)}`);
        },
        apply: () => inert(`${name}()`),
        construct: () => inert(`new ${name}`),
    });
}

function withFallback(name, target) {
    return new Proxy(target, { get: (t, key) => (key in t ? t[key] : inert(`${name}.${String(key)}`)) });
}

/**
 * @param {{properties: object, settings?: object, folder?: string}} options `settings` overrides
 *   contributed defaults by full key (`fsmComplete.interpreter`); `folder` is the workspace folder.
 */
function createStub({ properties, settings = {}, folder }) {
    const record = { status: [], notifications: [], log: [], documentsShown: [] };
    const providers = {};
    const commands = {};
    const opened = new EventEmitter();
    const changed = new EventEmitter(); // fires on every recorded change, for waiting without sleeps
    const note = (kind, value) => {
        record[kind].push(value);
        changed.fire({ kind, value });
    };
    const valueOf = (key) => (key in settings ? settings[key] : properties[key]?.default);
    const noEvent = () => new Disposable();
    let activeTextEditor;

    const channel = {
        name: 'fsm-complete',
        logLevel: 2,
        onDidChangeLogLevel: noEvent,
        append() {},
        appendLine: (line) => note('log', line),
        replace() {},
        clear() {},
        show() {},
        hide() {},
        dispose() {},
        trace() {},
        debug() {},
        info: (line) => note('log', `info ${line}`),
        warn: (line) => note('log', `warn ${line}`),
        error: (line) => note('log', `error ${String(line)}`),
    };
    const statusItem = {
        show() {},
        hide() {},
        dispose() {},
        set text(value) {
            note('status', value);
        },
    };
    const notify = (severity) => async (message, ...buttons) => {
        note('notifications', { severity, message: String(message), buttons: buttons.filter((b) => typeof b === 'string') });
        return undefined; // the user dismisses it
    };

    const vscode = withFallback('vscode', {
        version: '1.91.0',
        Disposable,
        EventEmitter,
        Position,
        Range,
        ThemeColor: class {
            constructor(id) {
                this.id = id;
            }
        },
        StatusBarAlignment: { Left: 1, Right: 2 },
        ViewColumn: { Active: -1, Beside: -2 },
        ProgressLocation: { SourceControl: 1, Window: 10, Notification: 15 },
        CompletionTriggerKind: { Invoke: 0, TriggerCharacter: 1, TriggerForIncompleteCompletions: 2 },
        InlineCompletionTriggerKind: { Invoke: 0, Automatic: 1 },
        InlineCompletionItem: class {
            constructor(insertText, range, command) {
                Object.assign(this, { insertText, range, command });
            }
        },
        InlineCompletionList: class {
            constructor(items) {
                this.items = items;
            }
        },
        Uri: { file: uri, parse: (s) => uri(s.replace(/^file:\/\//, '')) },
        env: { language: 'en', appName: 'Visual Studio Code', machineId: 'stub', sessionId: 'stub', uiKind: 1 },
        extensions: { getExtension: () => undefined, all: [] }, // no Python extension
        commands: {
            registerCommand: (id, handler) => {
                commands[id] = handler;
                return new Disposable(() => delete commands[id]);
            },
            executeCommand: async () => undefined,
        },
        window: withFallback('window', {
            createOutputChannel: () => channel,
            createStatusBarItem: () => statusItem,
            showErrorMessage: notify('error'),
            showWarningMessage: notify('warning'),
            showInformationMessage: notify('info'),
            showTextDocument: async (document) => note('documentsShown', document),
            get activeTextEditor() {
                return activeTextEditor;
            },
            visibleTextEditors: [],
            onDidChangeActiveTextEditor: noEvent,
            onDidChangeVisibleTextEditors: noEvent,
            withProgress: async (_options, task) =>
                task({ report() {} }, { isCancellationRequested: false, onCancellationRequested: noEvent }),
        }),
        workspace: withFallback('workspace', {
            workspaceFolders: folder ? [{ uri: uri(folder), name: 'workspace', index: 0 }] : undefined,
            textDocuments: [],
            notebookDocuments: [],
            getConfiguration: (section) => ({
                get: (key, fallback) => {
                    const full = section ? `${section}.${key}` : key;
                    if (full in properties || full in settings) return valueOf(full);
                    const prefix = `${full}.`; // a group: the nested object of its settings
                    const group = {};
                    for (const k of Object.keys(properties).filter((k) => k.startsWith(prefix))) {
                        let node = group;
                        const parts = k.slice(prefix.length).split('.');
                        for (const part of parts.slice(0, -1)) node = node[part] ??= {};
                        node[parts[parts.length - 1]] = valueOf(k);
                    }
                    return Object.keys(group).length ? group : fallback;
                },
                has: (key) => `${section}.${key}` in properties,
                inspect: () => undefined,
                update: async () => undefined,
            }),
            openTextDocument: async ({ content, language }) => ({ getText: () => content, languageId: language }),
            onDidOpenTextDocument: opened.event,
            onDidChangeConfiguration: noEvent,
            onDidCloseTextDocument: noEvent,
            onDidChangeTextDocument: noEvent,
            onDidSaveTextDocument: noEvent,
            onWillSaveTextDocument: noEvent,
            onDidChangeWorkspaceFolders: noEvent,
        }),
        languages: withFallback('languages', {
            match: (selector, document) => (document.languageId === 'python' ? 10 : 0),
            registerInlineCompletionItemProvider: (_selector, provider) => {
                providers.inline = provider;
                return new Disposable(() => delete providers.inline);
            },
            registerCompletionItemProvider: (_selector, provider) => {
                providers.completion = provider;
                return new Disposable(() => delete providers.completion);
            },
        }),
    });

    return {
        vscode,
        record,
        providers,
        commands,
        /** Opens a Python document (the client sends didOpen). */
        open(path, text) {
            const document = {
                uri: uri(path),
                fileName: path,
                languageId: 'python',
                version: 1,
                isClosed: false,
                lineCount: text.split('\n').length,
                getText: () => text,
            };
            opened.fire(document);
            return document;
        },
        setActiveEditor(document, position) {
            activeTextEditor = { document, selection: { active: position } };
        },
        /** Resolves with the first recorded `kind` entry matching `predicate`, waiting for it. */
        waitFor(kind, predicate, timeoutMs) {
            const found = record[kind].find(predicate);
            if (found !== undefined) return Promise.resolve(found);
            return new Promise((resolve, reject) => {
                const timer = setTimeout(() => {
                    subscription.dispose();
                    reject(new Error(`timed out waiting for ${kind}; recorded: ${JSON.stringify(record, null, 1).slice(-3000)}`));
                }, timeoutMs);
                const subscription = changed.event((event) => {
                    if (event.kind === kind && predicate(event.value)) {
                        clearTimeout(timer);
                        subscription.dispose();
                        resolve(event.value);
                    }
                });
            });
        },
    };
}

/** Loads dist/extension.js with `stub.vscode` as its `vscode` module (for the rest of the
 * process: bundled modules may require it lazily). */
function loadExtension(bundlePath, stub) {
    const load = Module._load;
    Module._load = function (request, ...rest) {
        return request === 'vscode' ? stub.vscode : load.call(this, request, ...rest);
    };
    delete require.cache[require.resolve(bundlePath)];
    return require(bundlePath);
}

module.exports = { createStub, loadExtension, Position };
