/**
 * The fsm-complete VS Code extension: starts `<python> -m lsp_server` over stdio with
 * vscode-languageclient and shows its LSP 3.18 inline completions as ghost text.
 *
 * - interpreter: `fsmComplete.interpreter`, else the Python extension's active environment, else
 *   `python3` (src/interpreter.ts); probed before the start so a missing interpreter or package
 *   gets a message that says the fix, with a "Show Logs" button;
 * - settings: `fsmComplete.*` as `initializationOptions`, changes pushed with
 *   `workspace/didChangeConfiguration` (src/settings.ts);
 * - status bar: starting / loading model (from the server's `$/progress`) / ready with the last
 *   completion's latency (ms, measured here) and fuse count / error (src/status.ts);
 * - commands: restart the server, show logs, explain the completion at the cursor (src/explain.ts).
 */

import { execFile } from 'node:child_process';
import * as os from 'node:os';
import { performance } from 'node:perf_hooks';
import * as vscode from 'vscode';
import {
    CloseAction,
    type CloseHandlerResult,
    ErrorAction,
    type ErrorHandler,
    type FeatureState,
    LanguageClient,
    type LanguageClientOptions,
    type Middleware,
    RevealOutputChannelOn,
    type ServerOptions,
    State,
    type StaticFeature,
    WorkDoneProgress,
    WorkDoneProgressCreateRequest,
} from 'vscode-languageclient/node';
import { EXPLAIN_METHOD, explainErrorMessage, explanationMarkdown, METHOD_NOT_FOUND } from './explain';
import {
    type Interpreter,
    PROBE_SCRIPT,
    type ProbeRun,
    readProbe,
    resolveInterpreter,
    SERVER_ARGS,
    startFailure,
} from './interpreter';
import { pickServerSettings, SECTION, serverKeys, serverSettings, type SettingSchema, syncSections } from './settings';
import {
    engineStats,
    type LastCompletion,
    type ModelSummary,
    modelLine,
    modelSummary,
    type ServerState,
    stateAfterLoad,
    statusView,
} from './status';

const NAME = 'fsm-complete';
const LAST_ENGINE_REQUEST = 'fsmComplete/lastEngineRequest';
const MODEL_REQUEST = 'fsmComplete/model';
const PROBE_TIMEOUT_MS = 20_000;
const STOP_TIMEOUT_MS = 2_000;
const STDERR_TAIL_LINES = 40;

let controller: Controller | undefined;

export async function activate(context: vscode.ExtensionContext): Promise<void> {
    const properties = (context.extension.packageJSON?.contributes?.configuration?.properties ?? {}) as Record<
        string,
        SettingSchema
    >;
    const log = vscode.window.createOutputChannel(NAME, { log: true });
    const status = new StatusItem();
    controller = new Controller(log, status, serverKeys(properties));
    context.subscriptions.push(
        log,
        status,
        controller,
        vscode.commands.registerCommand('fsmComplete.restart', () => controller?.restart()),
        vscode.commands.registerCommand('fsmComplete.showLogs', () => log.show()),
        vscode.commands.registerCommand('fsmComplete.explain', () => controller?.explain()),
        vscode.workspace.onDidChangeConfiguration((event) => {
            if (event.affectsConfiguration(`${SECTION}.interpreter`)) {
                log.info('fsmComplete.interpreter changed: restarting the server');
                void controller?.restart();
            }
        }),
    );
    void watchPythonEnvironment(context, log);
    await controller.restart();
}

export async function deactivate(): Promise<void> {
    await controller?.stop();
    controller = undefined;
}

/** The language client's lifecycle, one at a time: restarts queue behind each other. */
class Controller implements vscode.Disposable {
    private client: LanguageClient | undefined;
    private interpreter: Interpreter | undefined;
    private queue: Promise<void> = Promise.resolve();
    private state: ServerState = { kind: 'starting' };
    private failed = false; // this start already told the user why it failed
    private last: LastCompletion | undefined;
    private model: ModelSummary | undefined;
    private engineStatsSupported = true;
    private stderrTail: string[] = [];

    constructor(
        private readonly log: vscode.LogOutputChannel,
        private readonly status: StatusItem,
        private readonly keys: string[],
    ) {
        this.show({ kind: 'starting' });
    }

    restart(): Promise<void> {
        this.queue = this.queue.then(async () => {
            await this.stopClient();
            await this.startClient();
        });
        return this.queue;
    }

    stop(): Promise<void> {
        this.queue = this.queue.then(() => this.stopClient());
        return this.queue;
    }

    dispose(): void {
        void this.stop();
    }

    private show(state: ServerState): void {
        this.state = state;
        this.status.update(statusView(state, this.last, this.model));
    }

    /** The model loaded (or failed): ask the server which one, for the status item's tooltip. */
    private loaded(state: ServerState): void {
        this.model = undefined;
        this.show(state);
        const client = this.client;
        if (state.kind !== 'ready' || !client?.isRunning()) {
            return;
        }
        client.sendRequest(MODEL_REQUEST).then(
            (record) => {
                this.model = modelSummary(record);
                if (this.model) {
                    this.log.info(modelLine(this.model));
                }
                if (this.state.kind === 'ready') {
                    this.show(this.state);
                }
            },
            () => undefined, // an older server without the request: the tooltip names no model
        );
    }

    private async startClient(): Promise<void> {
        this.show({ kind: 'starting' });
        this.failed = false;
        this.last = undefined;
        this.model = undefined;
        this.engineStatsSupported = true;
        this.stderrTail = [];
        const folder = vscode.workspace.workspaceFolders?.[0];
        const config = vscode.workspace.getConfiguration(SECTION, folder);
        const interpreter = await resolveInterpreter({
            setting: config.get<string>('interpreter', ''),
            pythonExtension: () => pythonExtensionInterpreter(folder?.uri),
            workspaceFolder: folder?.uri.fsPath,
            home: os.homedir(),
        });
        this.interpreter = interpreter;
        const cwd = folder?.uri.scheme === 'file' ? folder.uri.fsPath : os.homedir();
        this.log.info(`interpreter: ${interpreter.command} (${interpreter.source})`);

        const probe = readProbe(interpreter, await runProbe(interpreter.command, cwd));
        if (!probe.ok) {
            this.fail(probe.message);
            return;
        }
        this.log.info(
            `Python ${probe.info.python.join('.')} at ${probe.info.executable}, ` +
                `fsm-complete ${probe.info.package ?? '(not installed as a package; lsp_server importable from the workspace)'}`,
        );

        const serverOptions: ServerOptions = {
            command: interpreter.command,
            args: [...SERVER_ARGS], // no `transport`: TransportKind.stdio would append `--stdio`
            options: { cwd, env: { ...process.env, PYTHONUNBUFFERED: '1' } },
        };
        const client = new LanguageClient(SECTION, NAME, serverOptions, this.clientOptions(config));
        client.registerFeature(
            new ModelProgressFeature(
                client,
                (state) => this.show(state),
                (state) => this.loaded(state),
            ),
        );
        client.onDidChangeState(({ newState }) => {
            if (newState === State.Running && this.state.kind === 'starting') {
                this.show({ kind: 'loading' });
            } else if (newState === State.Stopped && this.state.kind !== 'error') {
                this.show({ kind: 'stopped' });
            }
        });
        this.client = client;
        try {
            await client.start();
        } catch (error) {
            this.log.error(`the server failed to start: ${error instanceof Error ? error.message : String(error)}`);
            this.fail(startFailure(interpreter, this.stderrTail.join('\n')));
        }
    }

    private clientOptions(config: vscode.WorkspaceConfiguration): LanguageClientOptions {
        return {
            documentSelector: [
                { scheme: 'file', language: 'python' },
                { scheme: 'untitled', language: 'python' },
            ],
            outputChannel: this.log,
            revealOutputChannelOn: RevealOutputChannelOn.Never, // failures get our own message
            initializationOptions: serverSettings(this.keys, (key) => config.get(key)),
            synchronize: { configurationSection: syncSections(this.keys) },
            middleware: this.middleware(),
            stdioOptions: {
                stdout: () => undefined, // the protocol channel (stdio transport): never read here
                stderr: (input) => this.readStderr(input),
            },
            errorHandler: this.errorHandler(),
            initializationFailedHandler: (error) => {
                this.log.error(`initialize failed: ${error instanceof Error ? error.message : String(error)}`);
                return false;
            },
        };
    }

    private middleware(): Middleware {
        return {
            provideInlineCompletionItems: async (document, position, context, token, next) => {
                const started = performance.now();
                const result = await next(document, position, context, token);
                if (!token.isCancellationRequested) {
                    const items = Array.isArray(result) ? result : (result?.items ?? []);
                    void this.completed(document.uri, performance.now() - started, items.length > 0);
                }
                return result;
            },
            // The server's list item is the same model call as the ghost text: ask for it only
            // when the user invokes completion (Ctrl+Space), not on every keystroke.
            provideCompletionItem: (document, position, context, token, next) =>
                context.triggerKind === vscode.CompletionTriggerKind.Invoke
                    ? next(document, position, context, token)
                    : undefined,
            workspace: {
                // A server that pulls `fsmComplete` gets its own keys only.
                configuration: async (params, token, next) => {
                    const result = await next(params, token);
                    if (!Array.isArray(result)) {
                        return result;
                    }
                    return result.map((value, i) =>
                        params.items[i]?.section === SECTION ? pickServerSettings(value, this.keys) : value,
                    );
                },
            },
        };
    }

    private errorHandler(): ErrorHandler {
        let fallback: ErrorHandler | undefined;
        return {
            error: (error, message, count) => {
                fallback ??= this.client?.createDefaultErrorHandler(4);
                return fallback ? fallback.error(error, message, count) : { action: ErrorAction.Shutdown };
            },
            closed: async (): Promise<CloseHandlerResult> => {
                if (this.state.kind === 'starting' || this.state.kind === 'error') {
                    this.fail(startFailure(this.interpreter ?? { command: 'python3', source: 'default' }, this.stderrTail.join('\n')));
                    return { action: CloseAction.DoNotRestart, handled: true };
                }
                this.log.error(`the server stopped unexpectedly; its last output:\n${this.stderrTail.join('\n')}`);
                fallback ??= this.client?.createDefaultErrorHandler(4);
                return fallback ? fallback.closed() : { action: CloseAction.DoNotRestart };
            },
        };
    }

    /** Keep the server's stderr tail for failure messages. Its log records reach the output channel
     * as `window/logMessage` (at their own level); stderr lines are shown at debug level. */
    private readStderr(input: NodeJS.ReadableStream): void {
        let pending = '';
        input.on('data', (chunk: Buffer | string) => {
            const lines = (pending + chunk.toString()).split(/\r?\n/);
            pending = lines.pop() ?? '';
            for (const line of lines) {
                this.stderrTail.push(line);
                this.log.debug(`[stderr] ${line}`);
            }
            this.stderrTail.splice(0, Math.max(0, this.stderrTail.length - STDERR_TAIL_LINES));
        });
    }

    private fail(message: string): void {
        if (this.failed) {
            return;
        }
        this.failed = true;
        this.log.error(message);
        this.show({ kind: 'error', message });
        void vscode.window.showErrorMessage(message, 'Show Logs', 'Open Settings').then((choice) => {
            if (choice === 'Show Logs') {
                this.log.show();
            } else if (choice === 'Open Settings') {
                void vscode.commands.executeCommand('workbench.action.openSettings', SECTION);
            }
        });
    }

    private async completed(uri: vscode.Uri, latencyMs: number, offered: boolean): Promise<void> {
        const last: LastCompletion = { latencyMs, offered };
        if (offered && this.engineStatsSupported && this.client?.isRunning()) {
            try {
                const record = await this.client.sendRequest(LAST_ENGINE_REQUEST, {
                    textDocument: { uri: this.client.code2ProtocolConverter.asUri(uri) },
                });
                Object.assign(last, engineStats(record));
            } catch (error) {
                if ((error as { code?: unknown }).code === METHOD_NOT_FOUND) {
                    this.engineStatsSupported = false;
                }
            }
        }
        this.last = last;
        if (this.state.kind !== 'error' && this.state.kind !== 'stopped') {
            this.show({ kind: 'ready' });
        }
    }

    async explain(): Promise<void> {
        const editor = vscode.window.activeTextEditor;
        const client = this.client;
        if (!editor) {
            void vscode.window.showInformationMessage('fsm-complete: open a Python file and place the cursor first.');
            return;
        }
        if (!client?.isRunning()) {
            void vscode.window.showWarningMessage('fsm-complete: the server is not running.', 'Show Logs').then((c) => {
                if (c) {
                    this.log.show();
                }
            });
            return;
        }
        const params = {
            textDocument: { uri: client.code2ProtocolConverter.asUri(editor.document.uri) },
            position: client.code2ProtocolConverter.asPosition(editor.selection.active),
        };
        try {
            const result = await client.sendRequest(EXPLAIN_METHOD, params);
            const document = await vscode.workspace.openTextDocument({
                language: 'markdown',
                content: explanationMarkdown(result),
            });
            await vscode.window.showTextDocument(document, { viewColumn: vscode.ViewColumn.Beside, preserveFocus: true });
        } catch (error) {
            const message = explainErrorMessage(error);
            this.log.warn(message);
            void vscode.window.showWarningMessage(message);
        }
    }

    private async stopClient(): Promise<void> {
        const client = this.client;
        this.client = undefined;
        if (!client) {
            return;
        }
        try {
            if (client.needsStop()) {
                await client.stop(STOP_TIMEOUT_MS);
            }
        } catch (error) {
            this.log.warn(`stopping the server: ${error instanceof Error ? error.message : String(error)}`);
        }
        await client.dispose().catch(() => undefined);
    }
}

/**
 * Shows the server's model-loading `$/progress` in the status bar item. It takes over
 * `window/workDoneProgress/create` from the client's built-in progress feature (features
 * initialize in registration order, so this handler is the one installed).
 */
class ModelProgressFeature implements StaticFeature {
    private readonly subscriptions = new Set<vscode.Disposable>();

    constructor(
        private readonly client: LanguageClient,
        private readonly onState: (state: ServerState) => void,
        private readonly onLoaded: (state: ServerState) => void,
    ) {}

    getState(): FeatureState {
        return { kind: 'static' };
    }

    fillClientCapabilities(capabilities: { window?: { workDoneProgress?: boolean } }): void {
        capabilities.window = { ...capabilities.window, workDoneProgress: true };
    }

    initialize(): void {
        this.client.onRequest(WorkDoneProgressCreateRequest.type, ({ token }) => {
            const subscription = this.client.onProgress(WorkDoneProgress.type, token, (value) => {
                if (value.kind === 'end') {
                    subscription.dispose();
                    this.subscriptions.delete(subscription);
                    const next = stateAfterLoad(value.message);
                    if (next) {
                        this.onLoaded(next);
                    }
                } else {
                    this.onState({ kind: 'loading', message: value.message, percentage: value.percentage });
                }
            });
            this.subscriptions.add(subscription);
        });
    }

    clear(): void {
        for (const subscription of this.subscriptions) {
            subscription.dispose();
        }
        this.subscriptions.clear();
    }
}

class StatusItem implements vscode.Disposable {
    private readonly item = vscode.window.createStatusBarItem('fsmComplete.status', vscode.StatusBarAlignment.Right, 100);

    constructor() {
        this.item.name = NAME;
        this.item.command = 'fsmComplete.showLogs';
        this.item.show();
    }

    update(view: { text: string; tooltip: string; error: boolean }): void {
        this.item.text = view.text;
        this.item.tooltip = view.tooltip;
        this.item.backgroundColor = view.error ? new vscode.ThemeColor('statusBarItem.errorBackground') : undefined;
    }

    dispose(): void {
        this.item.dispose();
    }
}

function runProbe(command: string, cwd: string): Promise<ProbeRun> {
    return new Promise((resolve) => {
        execFile(command, ['-c', PROBE_SCRIPT], { cwd, timeout: PROBE_TIMEOUT_MS, windowsHide: true }, (error, stdout, stderr) => {
            const spawnFailed = error && typeof (error as NodeJS.ErrnoException).code === 'string';
            resolve({
                error: spawnFailed ? { code: (error as NodeJS.ErrnoException).code, message: error.message } : undefined,
                exitCode: error ? (typeof error.code === 'number' ? error.code : null) : 0,
                stdout: String(stdout),
                stderr: String(stderr),
            });
        });
    });
}

// ------------------------------------------------------------------ the Python extension (optional)

interface EnvironmentPath {
    id: string;
    path: string;
}

/** The part of ms-python.python's exported API used here (see @vscode/python-extension). */
interface PythonExtensionApi {
    environments?: {
        getActiveEnvironmentPath(resource?: vscode.Uri): EnvironmentPath;
        resolveEnvironment(env: EnvironmentPath | string): Promise<{ executable: { uri?: vscode.Uri } } | undefined>;
        onDidChangeActiveEnvironmentPath: vscode.Event<unknown>;
    };
    settings?: {
        getExecutionDetails(resource?: vscode.Uri): { execCommand: string[] | undefined };
    };
}

async function pythonExtensionApi(): Promise<PythonExtensionApi | undefined> {
    const extension = vscode.extensions.getExtension<PythonExtensionApi>('ms-python.python');
    if (!extension) {
        return undefined;
    }
    return extension.isActive ? extension.exports : await extension.activate();
}

/** The active environment's interpreter for `resource`, or undefined without the Python extension. */
async function pythonExtensionInterpreter(resource: vscode.Uri | undefined): Promise<string | undefined> {
    const api = await pythonExtensionApi();
    if (api?.environments) {
        const active = api.environments.getActiveEnvironmentPath(resource);
        const resolved = await api.environments.resolveEnvironment(active);
        return resolved?.executable.uri?.fsPath ?? active.path;
    }
    return api?.settings?.getExecutionDetails(resource).execCommand?.[0];
}

/** Restart when the Python extension's active environment changes and no interpreter is set. */
async function watchPythonEnvironment(context: vscode.ExtensionContext, log: vscode.LogOutputChannel): Promise<void> {
    try {
        const api = await pythonExtensionApi();
        const environments = api?.environments;
        if (!environments) {
            return;
        }
        context.subscriptions.push(
            environments.onDidChangeActiveEnvironmentPath(() => {
                if (!vscode.workspace.getConfiguration(SECTION).get<string>('interpreter', '').trim()) {
                    log.info('the active Python environment changed: restarting the server');
                    void controller?.restart();
                }
            }),
        );
    } catch (error) {
        log.warn(`the Python extension's API is unavailable: ${error instanceof Error ? error.message : String(error)}`);
    }
}
