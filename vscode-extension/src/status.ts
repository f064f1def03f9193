/**
 * What the status bar item says: server state, last completion latency (ms, measured by the
 * client from request to response) and the fuse count the server reports for it.
 */

export type ServerState =
    | { kind: 'starting' }
    | { kind: 'loading'; message?: string; percentage?: number }
    | { kind: 'ready' }
    | { kind: 'error'; message: string }
    | { kind: 'stopped' };

export interface LastCompletion {
    /** Client-side latency in ms. */
    latencyMs: number;
    /** Whether the server offered a completion. */
    offered: boolean;
    /** Tokens decoded, from `fsmComplete/lastEngineRequest`, when the server reports them. */
    tokens?: number;
    /** Tokens fused into one step by the FSM, when the server reports them. */
    fuses?: number;
}

export interface StatusView {
    text: string;
    tooltip: string;
    error: boolean;
}

export function statusView(state: ServerState, last?: LastCompletion): StatusView {
    const name = 'fsm-complete';
    switch (state.kind) {
        case 'starting':
            return { text: `$(loading~spin) ${name}`, tooltip: `${name}: starting the server`, error: false };
        case 'loading': {
            const percent = state.percentage !== undefined ? ` ${Math.round(state.percentage)}%` : '';
            const detail = state.message ? `: ${state.message}` : '';
            return {
                text: `$(loading~spin) ${name}: loading model${percent}`,
                tooltip: `${name}: loading the model${detail}`,
                error: false,
            };
        }
        case 'ready': {
            if (!last) {
                return { text: `$(check) ${name}`, tooltip: `${name}: ready`, error: false };
            }
            const parts = [`${Math.round(last.latencyMs)} ms`];
            if (last.fuses !== undefined) {
                parts.push(`${last.fuses} ${last.fuses === 1 ? 'fuse' : 'fuses'}`);
            }
            const tooltip = [`${name}: ready`, `last completion: ${Math.round(last.latencyMs)} ms`];
            if (!last.offered) {
                tooltip.push('(nothing offered)');
            }
            if (last.tokens !== undefined) {
                tooltip.push(`${last.tokens} tokens`);
            }
            if (last.fuses !== undefined) {
                tooltip.push(`${last.fuses} fused steps`);
            }
            return { text: `$(check) ${name} ${parts.join(' · ')}`, tooltip: tooltip.join(', '), error: false };
        }
        case 'error':
            return { text: `$(error) ${name}`, tooltip: `${state.message}\nClick to show the logs.`, error: true };
        case 'stopped':
            return { text: `$(circle-slash) ${name}`, tooltip: `${name}: the server is not running`, error: true };
    }
}

/** The state after the model-loading progress ends with `message` ("model loaded" or
 * "model loading failed"; "superseded" when a newer load replaced it). */
export function stateAfterLoad(message: string | undefined): ServerState | undefined {
    if (message === 'superseded') {
        return undefined; // another load is under way
    }
    if (message && /fail|error/i.test(message)) {
        return { kind: 'error', message: `fsm-complete: ${message}; see the logs.` };
    }
    return { kind: 'ready' };
}

/** Numbers read from an `fsmComplete/lastEngineRequest` answer (absent keys stay undefined). */
export function engineStats(record: unknown): { tokens?: number; fuses?: number } {
    if (typeof record !== 'object' || record === null) {
        return {};
    }
    const r = record as Record<string, unknown>;
    const num = (v: unknown) => (typeof v === 'number' && Number.isFinite(v) ? v : undefined);
    return { tokens: num(r.tokens), fuses: num(r.fuses) };
}
