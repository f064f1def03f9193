/**
 * What the status bar item says: server state, last completion latency (ms, measured by the
 * client from request to response) and the fuse count the server reports for it; its tooltip
 * also names the loaded model (`fsmComplete/model`: name, size, dtype, device, vocabulary, FIM template).
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

/** The loaded model, from `fsmComplete/model` (engine/api.py `ModelInfo`). */
export interface ModelSummary {
    name: string;
    /** Parameter count. */
    parameters: number;
    dtype: string;
    device: string;
    /** Tokenizer tokens. */
    vocabSize: number;
    fimTemplate: string;
    /** How the template was chosen: setting, checkpoint, metadata, tokenizer. */
    fimSource?: string;
    /** "safetensors" or "gguf". */
    format?: string;
    /** A GGUF file's type (F16, Q8_0, Q4_K_M, ...). */
    quantization?: string;
    /** The engine that runs it: "torch", "llama-cpp" or "vllm". */
    engine?: string;
}

/** One tooltip line: `model NAME: 6.5 M parameters (GGUF Q8_0), float32 on cpu, engine llama-cpp, vocabulary 8192, FIM template X`. */
export function modelLine(model: ModelSummary): string {
    const format = model.format === 'gguf' ? `GGUF ${model.quantization ?? ''}`.trim() : (model.format ?? '');
    const size = `${(model.parameters / 1e6).toFixed(1)} M parameters${format ? ` (${format})` : ''}`;
    const how = model.fimSource ? ` (${model.fimSource})` : '';
    const engine = model.engine ? `, engine ${model.engine}` : '';
    return (
        `model ${model.name}: ${size}, ${model.dtype} on ${model.device}${engine}, vocabulary ${model.vocabSize}, ` +
        `FIM template ${model.fimTemplate}${how}`
    );
}

/** The `fsmComplete/model` answer when it has the expected shape, else undefined. */
export function modelSummary(record: unknown): ModelSummary | undefined {
    if (typeof record !== 'object' || record === null) {
        return undefined;
    }
    const r = record as Record<string, unknown>;
    const str = (v: unknown) => typeof v === 'string';
    const num = (v: unknown) => typeof v === 'number' && Number.isFinite(v);
    if (!str(r.name) || !num(r.parameters) || !str(r.dtype) || !str(r.device) || !num(r.vocabSize) || !str(r.fimTemplate)) {
        return undefined;
    }
    const optional = (v: unknown) => (typeof v === 'string' ? v : undefined);
    return {
        name: r.name as string,
        parameters: r.parameters as number,
        dtype: r.dtype as string,
        device: r.device as string,
        vocabSize: r.vocabSize as number,
        fimTemplate: r.fimTemplate as string,
        fimSource: optional(r.fimSource),
        format: optional(r.format),
        quantization: optional(r.quantization),
        engine: optional(r.engine),
    };
}

export interface StatusView {
    text: string;
    tooltip: string;
    error: boolean;
}

export function statusView(state: ServerState, last?: LastCompletion, model?: ModelSummary): StatusView {
    const name = 'fsm-complete';
    const about = model ? `\n${modelLine(model)}` : '';
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
                return { text: `$(check) ${name}`, tooltip: `${name}: ready${about}`, error: false };
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
            return { text: `$(check) ${name} ${parts.join(' · ')}`, tooltip: tooltip.join(', ') + about, error: false };
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
