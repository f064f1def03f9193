import * as assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { explainErrorMessage, explanationMarkdown, METHOD_NOT_FOUND } from '../src/explain';

describe('explainErrorMessage', () => {
    it("shows the server's MethodNotFound message", () => {
        const error = Object.assign(new Error('Method Not Found: fsmComplete/explain'), { code: METHOD_NOT_FOUND });
        assert.equal(
            explainErrorMessage(error),
            'fsm-complete: Method Not Found: fsmComplete/explain (this server version cannot explain completions).',
        );
    });

    it('reports other failures with the method name', () => {
        const error = Object.assign(new Error('internal error'), { code: -32603 });
        assert.equal(explainErrorMessage(error), 'fsm-complete: fsmComplete/explain failed: internal error');
    });
});

describe('explanationMarkdown', () => {
    it('shows Markdown answers as they are and anything else as JSON', () => {
        assert.equal(explanationMarkdown('# why'), '# why');
        assert.equal(explanationMarkdown({ markdown: '**fused**' }), '**fused**');
        assert.match(explanationMarkdown({ tokens: [1, 2] }), /```json\n\{\n {2}"tokens"/);
        assert.match(explanationMarkdown(null), /nothing to explain/);
    });
});
