// End-to-end: the real server over stdio, driven by vscode-languageserver-protocol (the library
// under vscode-languageclient) with VS Code's client capabilities and the extension's settings.
//
//   FSM_PYTHON=/path/to/python npm run test:e2e
//
// FSM_PYTHON (default python3) must import lsp_server: an installed fsm-complete, or this checkout
// (the server runs with the repository root as its working directory). No sleeps: every wait is
// for a message, bounded by FSM_E2E_TIMEOUT_MS.

import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import { EventEmitter } from 'node:events';
import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';

const require = createRequire(import.meta.url);
const lsp = require('vscode-languageserver-protocol/node');
const { serverKeys, serverSettings } = require('../out/src/settings.js');

const HERE = dirname(fileURLToPath(import.meta.url));
const EXTENSION = join(HERE, '..');
const ROOT = join(EXTENSION, '..');
const PYTHON = process.env.FSM_PYTHON || 'python3';
const TIMEOUT_MS = Number(process.env.FSM_E2E_TIMEOUT_MS || 240_000);
const REQUEST_CANCELLED = -32800;

const manifest = JSON.parse(readFileSync(join(EXTENSION, 'package.json'), 'utf8'));
const properties = manifest.contributes.configuration.properties;
const fixture = JSON.parse(readFileSync(join(HERE, 'fixtures', 'vscode-client-capabilities.json'), 'utf8'));

/** The server process and a connection that records every message it exchanges. */
class Session {
    constructor() {
        this.sent = []; // requests we sent: {id, method}
        this.responses = new Map(); // id -> number of responses received
        this.events = []; // notifications and progress, in arrival order
        this.changed = new EventEmitter();
        this.stderr = '';
        this.proc = spawn(PYTHON, ['-m', 'lsp_server'], {
            cwd: ROOT,
            env: { ...process.env, PYTHONUNBUFFERED: '1' },
            stdio: ['pipe', 'pipe', 'pipe'],
        });
        this.exited = new Promise((resolve) => {
            this.proc.on('exit', (code, signal) => resolve({ code, signal }));
            this.proc.on('error', (error) => resolve({ code: null, signal: null, error }));
        });
        this.proc.stderr.on('data', (chunk) => {
            this.stderr = (this.stderr + chunk.toString()).slice(-20_000);
        });
        const reader = tapReader(new lsp.StreamMessageReader(this.proc.stdout), (message) => {
            if ('id' in message && !('method' in message)) {
                this.responses.set(message.id, (this.responses.get(message.id) ?? 0) + 1);
            }
        });
        const writer = tapWriter(new lsp.StreamMessageWriter(this.proc.stdin), (message) => {
            if ('id' in message && 'method' in message) {
                this.sent.push({ id: message.id, method: message.method });
            }
        });
        const c = (this.connection = lsp.createProtocolConnection(reader, writer));
        c.onRequest(lsp.WorkDoneProgressCreateRequest.type, ({ token }) => {
            this.record({ kind: 'progress-create', token });
            c.onProgress(lsp.WorkDoneProgress.type, token, (value) => this.record({ kind: 'progress', token, value }));
            return null;
        });
        c.onRequest(lsp.ConfigurationRequest.type, ({ items }) =>
            items.map((item) => (item.section === 'fsmComplete' ? this.settings ?? null : null)),
        );
        c.onRequest(lsp.RegistrationRequest.type, () => null);
        c.onRequest(lsp.UnregistrationRequest.type, () => null);
        c.onNotification(lsp.ShowMessageNotification.type, (params) => this.record({ kind: 'showMessage', ...params }));
        c.onNotification(lsp.LogMessageNotification.type, (params) => this.record({ kind: 'logMessage', ...params }));
        c.onNotification((method, params) => this.record({ kind: 'notification', method, params }));
        c.listen();
    }

    record(event) {
        this.events.push(event);
        this.changed.emit('event');
    }

    /** The first recorded event matching `predicate`, waiting for it (no polling). */
    waitFor(predicate, what) {
        const found = this.events.find(predicate);
        if (found) {
            return Promise.resolve(found);
        }
        return new Promise((resolve, reject) => {
            const timer = setTimeout(() => {
                this.changed.off('event', check);
                reject(new Error(`timed out after ${TIMEOUT_MS} ms waiting for ${what}\n${this.context()}`));
            }, TIMEOUT_MS);
            const check = () => {
                const event = this.events.find(predicate);
                if (event) {
                    clearTimeout(timer);
                    this.changed.off('event', check);
                    resolve(event);
                }
            };
            this.changed.on('event', check);
        });
    }

    request(type, params, token) {
        // an explicit `undefined` token would be sent as a second positional parameter
        return token ? this.connection.sendRequest(type, params, token) : this.connection.sendRequest(type, params);
    }

    context() {
        const shown = this.events.filter((e) => e.kind !== 'logMessage').map((e) => JSON.stringify(e));
        return `events:\n${shown.join('\n')}\nserver stderr (tail):\n${this.stderr.slice(-4000)}`;
    }
}

function tapReader(inner, onMessage) {
    return {
        onError: inner.onError,
        onClose: inner.onClose,
        onPartialMessage: inner.onPartialMessage,
        listen: (callback) =>
            inner.listen((message) => {
                onMessage(message);
                callback(message);
            }),
        dispose: () => inner.dispose(),
    };
}

function tapWriter(inner, onMessage) {
    return {
        onError: inner.onError,
        onClose: inner.onClose,
        write: (message) => {
            onMessage(message);
            return inner.write(message);
        },
        end: () => inner.end(),
        dispose: () => inner.dispose(),
    };
}

/** `text` with the cursor marker `<|>` removed, and the cursor as an LSP position (UTF-16). */
function withCursor(marked) {
    const offset = marked.indexOf('<|>');
    const text = marked.replace('<|>', '');
    const before = text.slice(0, offset);
    const line = before.split('\n').length - 1;
    const character = offset - (before.lastIndexOf('\n') + 1); // JS string length: UTF-16 code units
    return { text, offset, position: { line, character } };
}

/** The string offset of an LSP position (UTF-16 code units, as JS strings count). */
function offsetAt(text, { line, character }) {
    let offset = 0;
    for (let i = 0; i < line; i++) {
        offset = text.indexOf('\n', offset) + 1;
    }
    return offset + character;
}

function items(result) {
    return Array.isArray(result) ? result : (result?.items ?? []);
}

/** Whether `source` parses with the server's Python (ast.parse); returns the error text or ''. */
function syntaxError(source) {
    const run = spawnSync(PYTHON, ['-c', 'import ast, sys; ast.parse(sys.stdin.read())'], { input: source, encoding: 'utf8' });
    return run.status === 0 ? '' : run.stderr.trim().split('\n').pop();
}

const BUFFER = withCursor(
    [
        'import os',
        '',
        '',
        'def python_files(root):',
        '    """The names of the .py files directly under root (« racine » 🐍)."""',
        '    names = []',
        '    for name in os.listdir(root):',
        '        if name.endswith(".py"):',
        '            names.append(name)',
        '    return <|>',
        '',
    ].join('\n'),
);

test('a VS Code-like session: settings, inline completion, cancellation, shutdown', { timeout: TIMEOUT_MS * 2 }, async (t) => {
    const session = new Session();
    t.after(() => {
        if (session.proc.exitCode === null && session.proc.signalCode === null) {
            session.proc.kill();
        }
        session.connection.dispose();
    });
    const keys = serverKeys(properties);
    const defaults = serverSettings(keys, (key) => properties[`fsmComplete.${key}`].default);
    session.settings = defaults;

    // initialize with VS Code's capabilities and the extension's initializationOptions
    const init = await Promise.race([
        session.request(lsp.InitializeRequest.type, {
            processId: process.pid,
            clientInfo: fixture.clientInfo,
            locale: 'en',
            rootUri: null,
            workspaceFolders: null,
            capabilities: fixture.capabilities,
            initializationOptions: defaults,
            trace: 'off',
        }),
        session.exited.then(({ code, error }) => {
            throw new Error(`${PYTHON} -m lsp_server exited (${error ?? `code ${code}`}) before initialize\n${session.stderr}`);
        }),
    ]);
    const caps = init.capabilities;
    assert.ok(caps.inlineCompletionProvider, 'the server announces textDocument/inlineCompletion');
    assert.ok(caps.completionProvider, 'the server announces textDocument/completion');
    assert.ok([undefined, 'utf-16'].includes(caps.positionEncoding), `VS Code only speaks UTF-16, got ${caps.positionEncoding}`);
    const change = typeof caps.textDocumentSync === 'object' ? caps.textDocumentSync.change : caps.textDocumentSync;
    assert.equal(change, lsp.TextDocumentSyncKind.Incremental);
    await session.connection.sendNotification(lsp.InitializedNotification.type, {});

    // a settings change as the extension pushes it (the server's groups, not the client-only keys)
    const changed = structuredClone(defaults);
    changed.generation.maxTokens = 24;
    session.settings = changed;
    await session.connection.sendNotification(lsp.DidChangeConfigurationNotification.type, {
        settings: { fsmComplete: changed },
    });

    const uri = 'untitled:Untitled-1';
    await session.connection.sendNotification(lsp.DidOpenTextDocumentNotification.type, {
        textDocument: { uri, languageId: 'python', version: 1, text: BUFFER.text },
    });
    const copy = await session.request('fsmComplete/documentText', { textDocument: { uri } });
    assert.deepEqual(copy, { text: BUFFER.text, version: 1 });

    // 1. an inline completion, as VS Code asks while typing (it waits for the model to load)
    const params = {
        textDocument: { uri },
        position: BUFFER.position,
        context: { triggerKind: lsp.InlineCompletionTriggerKind.Automatic },
    };
    const first = items(await session.request(lsp.InlineCompletionRequest.type, params));
    assert.ok(first.length >= 1, `no inline completion after "return "\n${session.context()}`);
    const item = first[0];
    const insert = typeof item.insertText === 'string' ? item.insertText : item.insertText.value;
    assert.ok(insert.length > 0, 'the inline completion inserts text');
    const [start, end] = item.range
        ? [offsetAt(BUFFER.text, item.range.start), offsetAt(BUFFER.text, item.range.end)]
        : [BUFFER.offset, BUFFER.offset];
    const completed = BUFFER.text.slice(0, start) + insert + BUFFER.text.slice(end);
    t.diagnostic(`inline completion: ${JSON.stringify(insert)}`);
    assert.equal(syntaxError(completed), '', `the buffer with the ghost text accepted does not parse:\n${completed}`);

    // the model's loading progress ended well
    const loaded = await session.waitFor((e) => e.kind === 'progress' && e.value.kind === 'end', 'the model-loading $/progress end');
    assert.match(loaded.value.message ?? '', /loaded/);

    // 2. a second request, cancelled as VS Code does when the user keeps typing
    const cancel = new lsp.CancellationTokenSource();
    const second = session.request(lsp.InlineCompletionRequest.type, { ...params, context: { triggerKind: 1 } }, cancel.token);
    cancel.cancel();
    const outcome = await second.then(
        (result) => ({ result }),
        (error) => ({ error }),
    );
    t.diagnostic(`cancelled request: ${outcome.error ? `error ${outcome.error.code}` : JSON.stringify(outcome.result)}`);
    if (outcome.error) {
        assert.equal(outcome.error.code, REQUEST_CANCELLED, `a cancelled request fails with RequestCancelled: ${outcome.error}`);
    } else {
        assert.deepEqual(items(outcome.result), [], 'a cancelled request is answered with -32800 or an empty result');
    }

    // shutdown, exit
    assert.equal(await session.request(lsp.ShutdownRequest.type), null);
    await session.connection.sendNotification(lsp.ExitNotification.type);
    const { code } = await session.exited;
    assert.equal(code, 0, `exit after shutdown ends the server with 0\n${session.stderr.slice(-2000)}`);

    // every request was answered exactly once (the cancelled one included)
    const inline = session.sent.filter((r) => r.method === lsp.InlineCompletionRequest.method);
    assert.equal(inline.length, 2);
    for (const { id, method } of session.sent) {
        assert.equal(session.responses.get(id), 1, `${method} (id ${id}) was answered ${session.responses.get(id) ?? 0} times`);
    }
    // the settings the extension sends are all known to the server: no warning, no error
    const complaints = session.events.filter((e) => e.kind === 'showMessage' && e.type <= lsp.MessageType.Warning);
    assert.deepEqual(complaints, []);
});
