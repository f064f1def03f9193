/**
 * The `fsmComplete.*` settings, mapped to the server's settings tree.
 *
 * package.json's `contributes.configuration` is the one list of settings on this side; its
 * defaults equal `engine.settings.to_wire()` (tests/test_editors_settings.py keeps them in sync).
 * The keys are camelCase, as on the wire: `fsmComplete.generation.maxTokens` is
 * `{"generation": {"maxTokens": ...}}` in `initializationOptions` and in
 * `workspace/didChangeConfiguration`. No module here imports `vscode`, so the mapping is unit-tested
 * under plain Node.
 */

/** The configuration section, and the server's section in `workspace/didChangeConfiguration`. */
export const SECTION = 'fsmComplete';

/** Settings read by the extension itself; the server would report them as unknown. */
export const CLIENT_ONLY: ReadonlySet<string> = new Set(['interpreter', 'trace.server']);

export type SettingsTree = { [key: string]: unknown };

/** A contributed setting: `contributes.configuration.properties[...]`. */
export interface SettingSchema {
    type?: string | string[];
    default?: unknown;
}

/**
 * The server's keys among the contributed properties, relative to the section and sorted
 * (`["constraints.enabled", ..., "model.path", ...]`).
 */
export function serverKeys(properties: Record<string, SettingSchema>): string[] {
    const prefix = `${SECTION}.`;
    return Object.keys(properties)
        .filter((key) => key.startsWith(prefix))
        .map((key) => key.slice(prefix.length))
        .filter((key) => !CLIENT_ONLY.has(key))
        .sort();
}

/**
 * The sections the language client watches and pushes with `workspace/didChangeConfiguration`:
 * the server's top-level groups (`fsmComplete.model`, ..., `fsmComplete.logLevel`). Pushing these
 * rather than all of `fsmComplete` keeps the client-only settings away from the server.
 */
export function syncSections(keys: readonly string[]): string[] {
    const heads = new Set(keys.map((key) => key.split('.')[0]));
    return [...heads].sort().map((head) => `${SECTION}.${head}`);
}

/** The nested settings tree for `keys`, each value from `get(key)` (`key` relative to the section). */
export function serverSettings(keys: readonly string[], get: (key: string) => unknown): SettingsTree {
    const tree: SettingsTree = {};
    for (const key of keys) {
        const value = get(key);
        if (value === undefined) {
            continue;
        }
        const path = key.split('.');
        let node = tree;
        for (const part of path.slice(0, -1)) {
            const child = node[part];
            node = isTree(child) ? child : (node[part] = {});
        }
        node[path[path.length - 1]] = toJson(value);
    }
    return tree;
}

/**
 * `section` (the whole `fsmComplete` object, as `workspace/configuration` would answer) cut down
 * to the server's keys.
 */
export function pickServerSettings(section: unknown, keys: readonly string[]): SettingsTree {
    return serverSettings(keys, (key) => lookup(section, key));
}

/** `tree`'s value at a dotted `key`, or undefined. */
export function lookup(tree: unknown, key: string): unknown {
    let node: unknown = tree;
    for (const part of key.split('.')) {
        if (!isTree(node)) {
            return undefined;
        }
        node = node[part];
    }
    return node;
}

function isTree(value: unknown): value is SettingsTree {
    return typeof value === 'object' && value !== null && !Array.isArray(value);
}

/** A plain JSON copy (VS Code hands out frozen proxies for object settings). */
function toJson(value: unknown): unknown {
    return value === null || typeof value !== 'object' ? value : JSON.parse(JSON.stringify(value));
}
