/**
 * The "Explain Completion at Cursor" command: `fsmComplete/explain` with
 * `{"textDocument": {"uri"}, "position"}` (position in the negotiated encoding, UTF-16 code units
 * for VS Code). A server without the method answers -32601 (MethodNotFound); its message is shown.
 */

export const EXPLAIN_METHOD = 'fsmComplete/explain';

/** JSON-RPC 2.0 MethodNotFound. */
export const METHOD_NOT_FOUND = -32601;

/** The document to show for an answer: Markdown as it is, anything else as a JSON block. */
export function explanationMarkdown(result: unknown): string {
    if (typeof result === 'string') {
        return result;
    }
    if (typeof result === 'object' && result !== null) {
        const r = result as Record<string, unknown>;
        for (const key of ['markdown', 'text']) {
            if (typeof r[key] === 'string') {
                return r[key] as string;
            }
        }
    }
    if (result === null || result === undefined) {
        return '# fsm-complete\n\nThe server has nothing to explain at this position.\n';
    }
    return `# fsm-complete: explanation\n\n\`\`\`json\n${JSON.stringify(result, null, 2)}\n\`\`\`\n`;
}

/** The message for a failed request: the server's own words, prefixed, with a hint when the
 * method does not exist. */
export function explainErrorMessage(error: unknown): string {
    const code = typeof error === 'object' && error !== null ? (error as { code?: unknown }).code : undefined;
    const message = error instanceof Error ? error.message : String(error);
    if (code === METHOD_NOT_FOUND) {
        return `fsm-complete: ${message} (this server version cannot explain completions).`;
    }
    return `fsm-complete: ${EXPLAIN_METHOD} failed: ${message}`;
}
