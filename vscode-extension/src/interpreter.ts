/**
 * Which Python runs the server, and what to tell the user when it cannot.
 *
 * Order (as in microsoft/vscode-python-tools-extension-template): the `fsmComplete.interpreter`
 * setting, else the Python extension's active environment for the workspace, else `python3`.
 * Pure functions only; extension.ts does the spawning.
 */

import * as path from 'node:path';

/** The server's module: the command line is `<python> -m lsp_server`. */
export const SERVER_ARGS: readonly string[] = ['-m', 'lsp_server'];

export const DEFAULT_PYTHON = 'python3';

export const MIN_PYTHON: readonly [number, number] = [3, 10];

export type InterpreterSource = 'setting' | 'python-extension' | 'default';

export interface Interpreter {
    command: string;
    source: InterpreterSource;
}

export interface InterpreterInputs {
    /** `fsmComplete.interpreter` (empty: not set). */
    setting: string;
    /** The Python extension's active interpreter; undefined when it is not installed or has none. */
    pythonExtension?: () => Promise<string | undefined>;
    /** For `${workspaceFolder}` in the setting. */
    workspaceFolder?: string;
    /** For `~` and `${userHome}` in the setting. */
    home: string;
}

/** Resolves the interpreter; never throws (a failing Python extension falls through to `python3`). */
export async function resolveInterpreter(inputs: InterpreterInputs): Promise<Interpreter> {
    const setting = inputs.setting.trim();
    if (setting) {
        return { command: expandPath(setting, inputs.workspaceFolder, inputs.home), source: 'setting' };
    }
    if (inputs.pythonExtension) {
        try {
            const active = (await inputs.pythonExtension())?.trim();
            if (active) {
                return { command: active, source: 'python-extension' };
            }
        } catch {
            // the Python extension failed to activate or answer: fall back
        }
    }
    return { command: DEFAULT_PYTHON, source: 'default' };
}

/** `~`, `${userHome}` and `${workspaceFolder}` expanded; a relative path with a separator is taken
 * from the workspace folder (a bare name such as `python3.12` is left for PATH lookup). */
export function expandPath(value: string, workspaceFolder: string | undefined, home: string): string {
    let out = value
        .replace(/\$\{userHome\}/g, home)
        .replace(/\$\{workspaceFolder\}/g, workspaceFolder ?? '${workspaceFolder}');
    if (out === '~' || out.startsWith('~/') || out.startsWith('~\\')) {
        out = home + out.slice(1);
    }
    const hasSeparator = out.includes('/') || out.includes('\\');
    if (workspaceFolder && hasSeparator && !path.isAbsolute(out)) {
        out = path.join(workspaceFolder, out);
    }
    return out;
}

/** Describes where the interpreter came from, for messages. */
export function describe(interpreter: Interpreter): string {
    switch (interpreter.source) {
        case 'setting':
            return `${interpreter.command} (from the setting fsmComplete.interpreter)`;
        case 'python-extension':
            return `${interpreter.command} (the Python extension's active environment)`;
        default:
            return `${interpreter.command} (the default; set fsmComplete.interpreter to choose another)`;
    }
}

/**
 * Run as `<python> -c PROBE_SCRIPT` before starting the server. Prints one JSON line:
 * `{"python": [major, minor, micro], "executable": str, "package": version | null, "module": bool}`.
 * It imports nothing of the server, so it is quick and cannot fail on the server's dependencies.
 */
export const PROBE_SCRIPT = [
    'import json, sys',
    'from importlib import metadata, util',
    'try:',
    '    version = metadata.version("fsm-complete")',
    'except Exception:',
    '    version = None',
    'print(json.dumps({"python": list(sys.version_info[:3]), "executable": sys.executable,',
    '                  "package": version, "module": util.find_spec("lsp_server") is not None}))',
].join('\n');

export interface ProbeRun {
    /** The spawn error (`code` `ENOENT` when the interpreter does not exist). */
    error?: { code?: string | number; message: string };
    exitCode: number | null;
    stdout: string;
    stderr: string;
}

export interface ProbeInfo {
    python: number[];
    executable: string;
    package: string | null;
    module: boolean;
}

export type ProbeOutcome = { ok: true; info: ProbeInfo } | { ok: false; message: string };

/** What a probe run means: the interpreter's details, or an error message that says the fix. */
export function readProbe(interpreter: Interpreter, run: ProbeRun): ProbeOutcome {
    const who = describe(interpreter);
    const install = `${interpreter.command} -m pip install fsm-complete`;
    if (run.error) {
        if (run.error.code === 'ENOENT') {
            return {
                ok: false,
                message:
                    `fsm-complete: the Python interpreter ${who} was not found. ` +
                    'Set fsmComplete.interpreter to a Python 3.10+ interpreter where the server is installed ' +
                    `(pip install fsm-complete).`,
            };
        }
        return { ok: false, message: `fsm-complete: could not run ${who}: ${run.error.message}` };
    }
    let info: ProbeInfo | undefined;
    try {
        info = JSON.parse(run.stdout.trim().split(/\r?\n/).pop() ?? '') as ProbeInfo;
    } catch {
        info = undefined;
    }
    if (run.exitCode !== 0 || !info || !Array.isArray(info.python)) {
        const detail = lastLine(run.stderr) || `exit code ${run.exitCode}`;
        return {
            ok: false,
            message:
                `fsm-complete: ${who} is not a working Python 3 interpreter (${detail}). ` +
                'Set fsmComplete.interpreter to a Python 3.10+ interpreter.',
        };
    }
    const [major, minor] = info.python;
    if (major < MIN_PYTHON[0] || (major === MIN_PYTHON[0] && minor < MIN_PYTHON[1])) {
        return {
            ok: false,
            message:
                `fsm-complete: ${who} is Python ${info.python.join('.')}; the server needs ` +
                `Python ${MIN_PYTHON.join('.')} or newer. Set fsmComplete.interpreter to a newer interpreter.`,
        };
    }
    if (!info.module) {
        return {
            ok: false,
            message:
                `fsm-complete: the server is not installed for ${who}. ` +
                `Install it with \`${install}\` (or \`pip install .\` in a checkout), ` +
                'or set fsmComplete.interpreter to the Python where it is installed.',
        };
    }
    return { ok: true, info };
}

/**
 * The message for a server that exited during start-up, from the tail of its stderr
 * (`No module named ...` names the missing dependency).
 */
export function startFailure(interpreter: Interpreter, stderr: string): string {
    const missing = /No module named '?([\w.]+)'?/.exec(stderr);
    if (missing) {
        return (
            `fsm-complete: the server could not start with ${describe(interpreter)}: ` +
            `the module ${missing[1]} is missing. Reinstall the server with its dependencies ` +
            `(\`${interpreter.command} -m pip install fsm-complete\`).`
        );
    }
    const detail = lastLine(stderr);
    return `fsm-complete: the server could not start with ${describe(interpreter)}${detail ? `: ${detail}` : ''}.`;
}

function lastLine(text: string): string {
    const lines = text.split(/\r?\n/).map((line) => line.trim()).filter(Boolean);
    return lines.length ? lines[lines.length - 1] : '';
}
