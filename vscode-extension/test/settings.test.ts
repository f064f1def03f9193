import * as assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import * as path from 'node:path';
import { describe, it } from 'node:test';
import { CLIENT_ONLY, lookup, pickServerSettings, serverKeys, serverSettings, type SettingSchema, syncSections } from '../src/settings';

const manifest = JSON.parse(readFileSync(path.join(__dirname, '..', '..', 'package.json'), 'utf8'));
const properties: Record<string, SettingSchema> = manifest.contributes.configuration.properties;
const keys = serverKeys(properties);

describe('serverKeys', () => {
    it('lists every contributed fsmComplete.* setting except the client-only ones, sorted', () => {
        const contributed = Object.keys(properties).map((key) => key.replace(/^fsmComplete\./, ''));
        assert.deepEqual(keys, contributed.filter((key) => !CLIENT_ONLY.has(key)).sort());
        assert.ok(!keys.includes('interpreter'));
        assert.ok(!keys.includes('trace.server'));
        assert.ok(keys.includes('generation.maxTokens'));
    });

    it('ignores settings of other sections', () => {
        assert.deepEqual(serverKeys({ 'python.defaultInterpreterPath': {}, 'fsmComplete.logLevel': {} }), ['logLevel']);
    });
});

describe('syncSections', () => {
    it('pushes the server groups, not the client-only settings', () => {
        assert.deepEqual(syncSections(keys), [
            'fsmComplete.constraints',
            'fsmComplete.context',
            'fsmComplete.generation',
            'fsmComplete.logLevel',
            'fsmComplete.model',
        ]);
    });
});

describe('serverSettings', () => {
    it('nests dotted keys into the camelCase tree the server reads', () => {
        const defaults = serverSettings(keys, (key) => properties[`fsmComplete.${key}`].default);
        assert.deepEqual(Object.keys(defaults).sort(), ['constraints', 'context', 'generation', 'logLevel', 'model']);
        assert.equal(lookup(defaults, 'generation.maxTokens'), 48);
        assert.equal(lookup(defaults, 'generation.topP'), 0.95);
        assert.equal(lookup(defaults, 'constraints.validate'), true);
        assert.equal(lookup(defaults, 'model.path'), '');
        assert.equal(defaults.logLevel, 'info');
    });

    it('skips undefined values and copies objects', () => {
        const shared = { nested: [1, 2] };
        const tree = serverSettings(['a.b', 'a.c', 'd'], (key) => (key === 'a.b' ? shared : key === 'd' ? 0 : undefined));
        assert.deepEqual(tree, { a: { b: { nested: [1, 2] } }, d: 0 });
        assert.notEqual(lookup(tree, 'a.b'), shared);
    });
});

describe('pickServerSettings', () => {
    it('drops the client-only keys from a whole fsmComplete section', () => {
        const section = {
            interpreter: '/usr/bin/python3',
            trace: { server: 'verbose' },
            generation: { maxTokens: 16, unknownKey: 1 },
            logLevel: 'debug',
        };
        assert.deepEqual(pickServerSettings(section, keys), { generation: { maxTokens: 16 }, logLevel: 'debug' });
    });

    it('returns an empty tree for a missing section', () => {
        assert.deepEqual(pickServerSettings(null, keys), {});
    });
});
