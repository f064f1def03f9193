import * as assert from 'node:assert/strict';
import * as path from 'node:path';
import { describe, it } from 'node:test';
import { describe as describeInterpreter, expandPath, type Interpreter, readProbe, resolveInterpreter, startFailure } from '../src/interpreter';

const home = path.join(path.sep, 'home', 'ada');
const folder = path.join(path.sep, 'work', 'project');

describe('resolveInterpreter', () => {
    it('prefers the fsmComplete.interpreter setting', async () => {
        let asked = false;
        const result = await resolveInterpreter({
            setting: ' ~/venv/bin/python ',
            pythonExtension: async () => {
                asked = true;
                return '/opt/py/bin/python';
            },
            home,
        });
        assert.deepEqual(result, { command: path.join(home, 'venv/bin/python'), source: 'setting' });
        assert.equal(asked, false);
    });

    it("uses the Python extension's active environment when the setting is empty", async () => {
        const result = await resolveInterpreter({ setting: '', pythonExtension: async () => '/opt/py/bin/python', home });
        assert.deepEqual(result, { command: '/opt/py/bin/python', source: 'python-extension' });
    });

    it('falls back to python3 without the Python extension, or when it fails', async () => {
        assert.deepEqual(await resolveInterpreter({ setting: '', home }), { command: 'python3', source: 'default' });
        assert.deepEqual(await resolveInterpreter({ setting: '', pythonExtension: async () => undefined, home }), {
            command: 'python3',
            source: 'default',
        });
        const failing = async (): Promise<string> => {
            throw new Error('activation failed');
        };
        assert.deepEqual(await resolveInterpreter({ setting: '', pythonExtension: failing, home }), {
            command: 'python3',
            source: 'default',
        });
    });
});

describe('expandPath', () => {
    it('expands ${workspaceFolder}, ${userHome} and ~', () => {
        assert.equal(expandPath('${workspaceFolder}/.venv/bin/python', folder, home), `${folder}/.venv/bin/python`);
        assert.equal(expandPath('${userHome}/py/bin/python', folder, home), `${home}/py/bin/python`);
        assert.equal(expandPath('~', folder, home), home);
    });

    it('resolves relative paths against the workspace folder but leaves bare names to PATH', () => {
        assert.equal(expandPath('.venv/bin/python', folder, home), path.join(folder, '.venv/bin/python'));
        assert.equal(expandPath('python3.12', folder, home), 'python3.12');
        assert.equal(expandPath('.venv/bin/python', undefined, home), '.venv/bin/python');
    });
});

describe('readProbe', () => {
    const fromSetting: Interpreter = { command: '/missing/python', source: 'setting' };
    const fallback: Interpreter = { command: 'python3', source: 'default' };
    const probe = (info: object) => ({ exitCode: 0, stdout: `${JSON.stringify(info)}\n`, stderr: '' });

    it('names the setting when the interpreter does not exist', () => {
        const outcome = readProbe(fromSetting, { error: { code: 'ENOENT', message: 'spawn ENOENT' }, exitCode: null, stdout: '', stderr: '' });
        assert.equal(outcome.ok, false);
        assert.match(!outcome.ok ? outcome.message : '', /\/missing\/python \(from the setting fsmComplete\.interpreter\) was not found/);
    });

    it('says how to install the server when lsp_server is missing', () => {
        const outcome = readProbe(fallback, probe({ python: [3, 11, 2], executable: '/usr/bin/python3', package: null, module: false }));
        assert.equal(outcome.ok, false);
        assert.match(!outcome.ok ? outcome.message : '', /python3 -m pip install fsm-complete/);
    });

    it('rejects Python older than 3.10', () => {
        const outcome = readProbe(fallback, probe({ python: [3, 8, 10], executable: '/usr/bin/python3', package: '0.1.0', module: true }));
        assert.equal(outcome.ok, false);
        assert.match(!outcome.ok ? outcome.message : '', /Python 3\.8\.10; the server needs Python 3\.10/);
    });

    it('reports an interpreter that is not Python 3', () => {
        const outcome = readProbe(fallback, { exitCode: 1, stdout: '', stderr: 'SyntaxError: invalid syntax\n' });
        assert.equal(outcome.ok, false);
        assert.match(!outcome.ok ? outcome.message : '', /not a working Python 3 interpreter \(SyntaxError: invalid syntax\)/);
    });

    it('accepts a Python with the server importable', () => {
        const info = { python: [3, 12, 1], executable: '/venv/bin/python', package: '0.1.0', module: true };
        assert.deepEqual(readProbe(fallback, probe(info)), { ok: true, info });
    });
});

describe('startFailure', () => {
    it('names the missing dependency', () => {
        const stderr = 'Traceback (most recent call last):\n  ...\nModuleNotFoundError: No module named \'pygls\'\n';
        assert.match(startFailure({ command: 'python3', source: 'default' }, stderr), /the module pygls is missing/);
    });

    it('quotes the last stderr line otherwise', () => {
        assert.match(startFailure({ command: 'py', source: 'setting' }, 'boom\nRuntimeError: bad\n'), /: RuntimeError: bad\.$/);
        assert.match(describeInterpreter({ command: 'py', source: 'python-extension' }), /active environment/);
    });
});
