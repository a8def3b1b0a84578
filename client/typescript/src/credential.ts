/* credential.ts: the API key every call of a client carries, in
 * RequestEnvelope.credential, for a server with --tenants (docs/CLIENTS.md,
 * "API keys").
 *
 * The key comes from ClientOptions.apiKey, else $SANDBOX_API_KEY. It is
 * checked here as the C library checks it (sbxc_client_set_api_key): at most
 * 512 bytes of printable ASCII, no spaces, so a key with a stray newline
 * fails at once, in this process, instead of as UNAUTHENTICATED from every
 * server. Never put the key in a message: the errors say which rule it
 * breaks and where, not what it is. */

/** The longest key, in bytes (the C library's SBXC_API_KEY_MAX, the server's cap). */
export const API_KEY_MAX = 512;
export const API_KEY_ENV = "SANDBOX_API_KEY";
const RULE = `at most ${API_KEY_MAX} bytes of printable ASCII without spaces`;

/** Throws RangeError naming the rule `key` breaks (never the key). */
export function checkApiKey(key: string, source = "ClientOptions.apiKey"): void {
  const n = key.length; // UTF-16 units: each is at least one byte
  if (n > API_KEY_MAX) {
    throw new RangeError(`${source}: an API key is ${RULE}; this one has ${n} characters`);
  }
  for (let i = 0; i < n; i++) {
    const c = key.charCodeAt(i);
    if (c < 0x21 || c > 0x7e) {
      throw new RangeError(`${source}: an API key is ${RULE}; character ${i + 1} of ${n} is a space, a control character or not ASCII`);
    }
  }
}

/** The key a client sends: apiKey; when it is undefined, $SANDBOX_API_KEY;
 * "" (or an empty variable) sends none. */
export function apiKeyFrom(apiKey: string | undefined, env: NodeJS.ProcessEnv = process.env): string {
  let source = "ClientOptions.apiKey";
  let key: unknown = apiKey;
  if (key === undefined) {
    key = env[API_KEY_ENV] ?? "";
    source = `$${API_KEY_ENV}`;
  }
  if (typeof key !== "string") {
    throw new TypeError(`ClientOptions.apiKey: a string or undefined, not ${key === null ? "null" : typeof key}`);
  }
  checkApiKey(key, source);
  return key;
}
