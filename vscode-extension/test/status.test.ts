import * as assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { engineStats, modelSummary, stateAfterLoad, statusView } from '../src/status';

describe('statusView', () => {
    it('shows model loading with its percentage', () => {
        const view = statusView({ kind: 'loading', message: 'building token index', percentage: 41.6 });
        assert.equal(view.text, '$(loading~spin) fsm-complete: loading model 42%');
        assert.match(view.tooltip, /building token index/);
        assert.equal(view.error, false);
    });

    it('shows the last latency and fuse count when ready', () => {
        const view = statusView({ kind: 'ready' }, { latencyMs: 123.4, offered: true, tokens: 9, fuses: 1 });
        assert.equal(view.text, '$(check) fsm-complete 123 ms · 1 fuse');
        assert.match(view.tooltip, /9 tokens/);
        assert.equal(statusView({ kind: 'ready' }, { latencyMs: 80, offered: false }).text, '$(check) fsm-complete 80 ms');
        assert.equal(statusView({ kind: 'ready' }).text, '$(check) fsm-complete');
    });

    it('names the loaded model in the tooltip', () => {
        const model = modelSummary({
            name: 'ollama:qwen2.5-coder:1.5b',
            parameters: 1543714304,
            dtype: 'float32',
            device: 'cpu',
            vocabSize: 151665,
            fimTemplate: 'qwen',
            fimSource: 'metadata',
            format: 'gguf',
            quantization: 'Q8_0',
            engine: 'llama-cpp',
        });
        assert.ok(model);
        const ready = statusView({ kind: 'ready' }, undefined, model);
        assert.equal(ready.text, '$(check) fsm-complete');
        assert.match(ready.tooltip, /model ollama:qwen2\.5-coder:1\.5b: 1543\.7 M parameters \(GGUF Q8_0\)/);
        assert.match(ready.tooltip, /float32 on cpu, engine llama-cpp, vocabulary 151665, FIM template qwen \(metadata\)/);
        const after = statusView({ kind: 'ready' }, { latencyMs: 50, offered: true }, model);
        assert.match(after.tooltip, /last completion: 50 ms[^]*FIM template qwen/);
        assert.equal(modelSummary({ name: 'x' }), undefined);
        assert.equal(modelSummary(null), undefined);
    });

    it('marks errors', () => {
        const view = statusView({ kind: 'error', message: 'fsm-complete: model directory /x has no tokenizer.json' });
        assert.equal(view.error, true);
        assert.match(view.tooltip, /tokenizer\.json/);
    });
});

describe('stateAfterLoad', () => {
    it('maps the end of the loading progress to ready or error', () => {
        assert.deepEqual(stateAfterLoad('model loaded'), { kind: 'ready' });
        assert.equal(stateAfterLoad('model loading failed')?.kind, 'error');
        assert.equal(stateAfterLoad('superseded'), undefined);
        assert.deepEqual(stateAfterLoad(undefined), { kind: 'ready' });
    });
});

describe('engineStats', () => {
    it('reads tokens and fuses when present', () => {
        assert.deepEqual(engineStats({ tokens: 7, fuses: 2, stopReason: 'eos' }), { tokens: 7, fuses: 2 });
        assert.deepEqual(engineStats({ tokens: 7 }), { tokens: 7, fuses: undefined });
        assert.deepEqual(engineStats(null), {});
    });
});
