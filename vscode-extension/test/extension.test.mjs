// The bundled extension (dist/extension.js) activated under Node with a stand-in `vscode` module
// (test/vscode-stub.cjs) and the real vscode-languageclient and server: interpreter resolution,
// the start-up probe, the model-loading status, inline completions through the client's
// middleware, the explain command, and the message for a missing interpreter.
//
//   npm run build && FSM_PYTHON=/path/to/python node --test test/extension.test.mjs

import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';

const require = createRequire(import.meta.url);
const { createStub, loadExtension, Position } = require('./vscode-stub.cjs');

const HERE = dirname(fileURLToPath(import.meta.url));
const EXTENSION = join(HERE, '..');
const ROOT = join(EXTENSION, '..');
const BUNDLE = join(EXTENSION, 'dist', 'extension.js');
const PYTHON = process.env.FSM_PYTHON || 'python3';
const TIMEOUT_MS = Number(process.env.FSM_E2E_TIMEOUT_MS || 240_000);
const manifest = JSON.parse(readFileSync(join(EXTENSION, 'package.json'), 'utf8'));
const properties = manifest.contributes.configuration.properties;

function context() {
    return { subscriptions: [], extension: { packageJSON: manifest } };
}

test('a missing interpreter gets a message naming the setting, with Show Logs', { timeout: 60_000 }, async () => {
    const stub = createStub({ properties, settings: { 'fsmComplete.interpreter': '/nonexistent/bin/python' } });
    const extension = loadExtension(BUNDLE, stub);
    await extension.activate(context());
    const error = await stub.waitFor('notifications', (n) => n.severity === 'error', 10_000);
    assert.match(error.message, /\/nonexistent\/bin\/python \(from the setting fsmComplete\.interpreter\) was not found/);
    assert.deepEqual(error.buttons, ['Show Logs', 'Open Settings']);
    assert.match(stub.record.status.at(-1), /\$\(error\)/);
    assert.equal(stub.providers.inline, undefined, 'no server, no provider');
    await extension.deactivate();
});

test('activation starts the server; ghost text, latency and explain work', { timeout: TIMEOUT_MS }, async () => {
    const stub = createStub({
        properties,
        folder: ROOT, // the server runs here, so a checkout works without installing it
        settings: {
            'fsmComplete.interpreter': PYTHON,
            'fsmComplete.generation.maxTokens': 24,
            'fsmComplete.logLevel': 'debug', // the server logs each engine request
        },
    });
    const extension = loadExtension(BUNDLE, stub);
    await extension.activate(context());
    try {
        assert.ok(stub.providers.inline, 'the client registered an inline completion provider');
        assert.ok(stub.commands['fsmComplete.restart'] && stub.commands['fsmComplete.showLogs']);
        await stub.waitFor('status', (s) => s.includes('loading model'), TIMEOUT_MS);

        const text = [
            'import os',
            '',
            '',
            'def python_files(root):',
            '    """The names of the .py files directly under root."""',
            '    names = []',
            '    for name in os.listdir(root):',
            '        if name.endswith(".py"):',
            '            names.append(name)',
            '    return ',
            '',
        ].join('\n');
        const document = stub.open(join(ROOT, 'untitled_stub.py'), text);
        const position = new Position(9, 11);
        const token = { isCancellationRequested: false, onCancellationRequested: () => ({ dispose() {} }) };
        const result = await stub.providers.inline.provideInlineCompletionItems(
            document,
            position,
            { triggerKind: 1, selectedCompletionInfo: undefined },
            token,
        );
        // whether the model offers something here is the server's business (test/e2e.test.mjs);
        // this checks that the request reached the engine with the cursor where VS Code put it
        const items = Array.isArray(result) ? result : (result?.items ?? []);
        for (const item of items) {
            assert.equal(typeof item.insertText, 'string');
        }
        const logged = await stub.waitFor('log', (line) => /engine request \S*untitled_stub\.py /.test(line), 10_000);
        const seen = JSON.parse(logged.slice(logged.indexOf('{')));
        assert.equal(seen.prefixTail, text.slice(0, text.indexOf('return ') + 'return '.length).slice(-64));
        assert.equal(seen.suffixHead, '\n');
        const ready = await stub.waitFor('status', (s) => /\$\(check\) fsm-complete \d+ ms/.test(s), 10_000);
        assert.match(ready, /\d+ ms/);

        // typing (not Ctrl+Space) does not ask the server for list items: the middleware answers
        const listed = await stub.providers.completion.provideCompletionItems(document, position, token, {
            triggerKind: 1,
            triggerCharacter: '.',
        });
        assert.equal(listed, undefined);

        stub.setActiveEditor(document, position);
        await stub.commands['fsmComplete.explain']();
        const explained = stub.record.documentsShown.length > 0;
        const warning = stub.record.notifications.find((n) => n.message.includes('fsmComplete/explain'));
        assert.ok(explained || warning, 'explain shows an answer or the server\'s MethodNotFound message');

        const complaints = stub.record.notifications.filter((n) => n.message.includes('invalid settings'));
        assert.deepEqual(complaints, [], 'the server accepts every setting the extension sends');
    } finally {
        await extension.deactivate();
    }
    assert.match(stub.record.status.at(-1), /circle-slash/, 'the server stopped');
});
