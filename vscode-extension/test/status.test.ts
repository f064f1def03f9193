import * as assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { engineStats, stateAfterLoad, statusView } from '../src/status';

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
