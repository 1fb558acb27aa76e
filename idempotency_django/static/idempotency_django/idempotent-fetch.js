// idempotentFetch: the client's half of the Idempotency-Key protocol.
//
// One key per call (a UUIDv7 unless you pass one), the same key on every retry,
// retries with exponential backoff and full jitter on network errors, timeouts,
// 5xx, 408, 425, 429 and 409 (honouring Retry-After), never on another 4xx;
// bounded in attempts and in total time. Returns the final Response.
// No dependencies, no build step: an ES module served by {% static %}.

export const RETRY_STATUSES = Object.freeze([408, 409, 425, 429]);

const DEFAULTS = Object.freeze({
  headerName: "Idempotency-Key",
  maxAttempts: 5,
  maxElapsed: 30000, // ms, the whole call: attempts and waits
  baseDelay: 300, // ms, the first backoff ceiling
  maxDelay: 10000, // ms, the largest backoff ceiling
  timeout: 0, // ms per attempt; 0 = none
});

const OWN_OPTIONS = [
  "idempotencyKey", "headerName", "maxAttempts", "maxElapsed", "baseDelay", "maxDelay",
  "timeout", "json", "onAttempt", "random", "signal",
];

/** A UUIDv7 (RFC 9562): 48 bits of Unix milliseconds, then random bits. */
export function uuidv7(now = Date.now()) {
  const bytes = new Uint8Array(16);
  crypto.getRandomValues(bytes);
  let ms = now;
  for (let i = 5; i >= 0; i--) {
    bytes[i] = ms % 256;
    ms = Math.floor(ms / 256);
  }
  bytes[6] = (bytes[6] & 0x0f) | 0x70; // version 7
  bytes[8] = (bytes[8] & 0x3f) | 0x80; // variant 10
  const hex = Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20)}`;
}

/** Whether an answer with this status is worth retrying with the same key. */
export function isRetryable(status) {
  return status >= 500 || RETRY_STATUSES.includes(status);
}

/** Retry-After in ms (delta-seconds or an HTTP date), or null when absent or unreadable. */
export function retryAfterMs(response, now = Date.now()) {
  const value = response.headers.get("Retry-After");
  if (value === null || value.trim() === "") return null;
  if (/^\d+$/.test(value.trim())) return Number(value.trim()) * 1000;
  const date = Date.parse(value);
  return Number.isNaN(date) ? null : Math.max(0, date - now);
}

/** Full jitter: a random wait between 0 and the exponential ceiling for this attempt. */
export function backoffMs(attempt, { baseDelay, maxDelay, random = Math.random }) {
  const ceiling = Math.min(maxDelay, baseDelay * 2 ** (attempt - 1));
  return Math.floor(random() * ceiling);
}

/**
 * fetch() made safe to retry: `options` are fetch's (method defaults to POST) plus
 * idempotencyKey, headerName, maxAttempts, maxElapsed, baseDelay, maxDelay,
 * timeout (per attempt), json (a body to send as JSON) and onAttempt(info),
 * called after every attempt with {attempt, key, response, error, delay}.
 */
export async function idempotentFetch(url, options = {}) {
  const settings = { ...DEFAULTS, ...options };
  const key = options.idempotencyKey ?? uuidv7();
  const init = requestInit(options, settings.headerName, key);
  const started = Date.now();
  for (let attempt = 1; ; attempt++) {
    // An attempt never outlives the call's time budget.
    const remaining = settings.maxElapsed - (Date.now() - started);
    const limit = settings.timeout > 0 ? Math.min(settings.timeout, remaining) : remaining;
    const { response, error } = await attemptOnce(url, init, options.signal, Math.max(limit, 1));
    const delay = nextDelay(attempt, response, error, settings, Date.now() - started);
    if (settings.onAttempt) settings.onAttempt({ attempt, key, response, error, delay });
    if (delay === null) {
      if (error) throw error;
      return response;
    }
    await sleep(delay, options.signal);
  }
}

function requestInit(options, headerName, key) {
  const init = {};
  for (const [name, value] of Object.entries(options)) {
    if (!OWN_OPTIONS.includes(name)) init[name] = value;
  }
  init.method = (options.method ?? "POST").toUpperCase();
  init.headers = new Headers(options.headers);
  init.headers.set(headerName, key);
  if (options.json !== undefined) {
    init.body = JSON.stringify(options.json);
    if (!init.headers.has("Content-Type")) init.headers.set("Content-Type", "application/json");
  }
  if (init.body instanceof ReadableStream) {
    throw new TypeError("idempotentFetch: a stream body cannot be sent again; pass a string, Blob or FormData.");
  }
  return init;
}

async function attemptOnce(url, init, callerSignal, timeout) {
  if (callerSignal?.aborted) throw callerSignal.reason;
  const controller = new AbortController();
  const forward = () => controller.abort(callerSignal.reason);
  callerSignal?.addEventListener("abort", forward, { once: true });
  let timedOut = false;
  const timer = timeout > 0 ? setTimeout(() => { timedOut = true; controller.abort(); }, timeout) : null;
  try {
    return { response: await fetch(url, { ...init, signal: controller.signal }), error: null };
  } catch (error) {
    // The caller's own abort is final; anything else is the network's fault: retry.
    if (callerSignal?.aborted) throw callerSignal.reason;
    if (timedOut) return { response: null, error: new DOMException(`no answer within ${timeout} ms`, "TimeoutError") };
    return { response: null, error };
  } finally {
    clearTimeout(timer);
    callerSignal?.removeEventListener("abort", forward);
  }
}

// The wait before the next attempt, or null when this answer is the final one.
function nextDelay(attempt, response, error, settings, elapsed) {
  if (response && !isRetryable(response.status)) return null;
  if (attempt >= settings.maxAttempts) return null;
  const backoff = backoffMs(attempt, settings);
  const asked = response ? retryAfterMs(response) : null;
  const delay = asked === null ? backoff : Math.max(asked, backoff);
  return elapsed + delay > settings.maxElapsed ? null : delay;
}

function sleep(ms, signal) {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) return reject(signal.reason);
    const stop = () => { clearTimeout(timer); reject(signal.reason); };
    const timer = setTimeout(() => { signal?.removeEventListener("abort", stop); resolve(); }, ms);
    signal?.addEventListener("abort", stop, { once: true });
  });
}
