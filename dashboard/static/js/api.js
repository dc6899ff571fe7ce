// Calls to TaskForge's JSON API (DESIGN §4) from the page. Every state change the
// dashboard makes goes through here, with the same-origin fetch defaults, so the
// server's cross-origin guard sees Sec-Fetch-Site: same-origin.

/** ApiError is a failed call: HTTP status, the API's error code and message. */
export class ApiError extends Error {
  constructor(status, code, message) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

/** LosslessNumber is a JSON number that a double cannot hold as written. */
export class LosslessNumber {
  constructor(source) { this.source = source; }
  toString() { return this.source; }
}

// Keeps numbers such as 12345678901234567890 or 1.50 exactly as the JSON wrote
// them, where the browser supports JSON.parse source text access.
function lossless(_key, value, context) {
  if (typeof value === 'number' && context && typeof context.source === 'string' &&
      String(value) !== context.source) {
    return new LosslessNumber(context.source);
  }
  return value;
}

/**
 * api(method, path, body, {lossless}) sends a request and returns the decoded
 * JSON (null for 204). It throws ApiError for an error response.
 */
export async function api(method, path, body, opts = {}) {
  const init = { method, headers: { Accept: 'application/json' }, credentials: 'same-origin' };
  if (body !== undefined) {
    init.headers['Content-Type'] = 'application/json';
    init.body = JSON.stringify(body);
  }
  let resp;
  try {
    resp = await fetch(path, init);
  } catch (err) {
    throw new ApiError(0, 'network', `TaskForge did not answer (${err.message})`);
  }
  if (resp.status === 401) {
    // The session ended (signed out elsewhere, expired, or its token revoked).
    window.location.assign('/admin/login');
    throw new ApiError(401, 'unauthorized', 'Signed out: sign in again');
  }
  if (resp.status === 204) return null;
  const text = await resp.text();
  let data = null;
  try {
    data = text ? JSON.parse(text, opts.lossless ? lossless : undefined) : null;
  } catch {
    throw new ApiError(resp.status, 'bad_response', `unexpected response (${resp.status})`);
  }
  if (!resp.ok) {
    const e = data && data.error;
    throw new ApiError(resp.status, e ? e.code : 'http_' + resp.status, e ? e.message : `HTTP ${resp.status}`);
  }
  return data;
}

/** q encodes a path segment. */
export const q = encodeURIComponent;
