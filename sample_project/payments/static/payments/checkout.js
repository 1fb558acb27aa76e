// The checkout page: every Pay sends the intent's key through idempotentFetch and
// logs each attempt; the charge count is read back from the server after each call.
import { idempotentFetch, uuidv7 } from "idempotent-fetch";

const root = document.getElementById("checkout");
const log = document.querySelector("#log tbody");
const SLOW = { delay: 3, timeout: 1000 }; // the server takes 3 s, the client waits 1 s
let intentKey = null;
let rows = 0;
let calls = 0;

function newIntent() {
  intentKey = uuidv7();
  document.getElementById("intent-key").textContent = intentKey;
}

function setPending(change) {
  root.dataset.pending = String(Number(root.dataset.pending) + change);
}

function cell(row, text, className) {
  const td = row.insertCell();
  td.textContent = text;
  if (className) td.className = className;
}

function logAttempt(call, { attempt, key, response, error, delay }) {
  const row = log.insertRow(0);
  const replayed = response?.headers.get("Idempotent-Replayed") === "true";
  const status = response ? `${response.status} ${response.statusText}` : `${error.name}: ${error.message}`;
  row.className = !response ? "error" : replayed ? "replay" : response.ok ? "fresh" : response.status === 409 || response.status >= 500 ? "busy" : "error";
  Object.assign(row.dataset, { call, key, attempt, status: response?.status ?? "", replayed, error: error?.name ?? "" });
  cell(row, String(++rows));
  cell(row, `Pay #${call}`, "click");
  cell(row, `…${key.slice(-8)}`, "key");
  cell(row, String(attempt));
  cell(row, status, "status");
  cell(row, replayed ? "true" : "");
  cell(row, response?.headers.get("Retry-After") ?? "");
  cell(row, delay === null ? "final" : `${delay} ms`);
  cell(row, "", "why");
  reason(response).then((why) => { row.dataset.why = why; row.lastChild.textContent = why; });
}

// Why an answer was not a success: the problem's detail (or the view's own error).
async function reason(response) {
  if (!response || response.ok) return "";
  let body = {};
  try { body = await response.clone().json(); } catch { return ""; }
  const why = body.detail ?? body.error ?? "";
  return response.status === 422 ? `${why} A switch changed the request: press New intent.` : why;
}

async function refreshCount() {
  const url = `${root.dataset.statusUrl}?key=${encodeURIComponent(intentKey)}`;
  const answer = await (await fetch(url, { cache: "no-store" })).json();
  document.getElementById("charges").textContent = String(answer.intent_charges);
  document.getElementById("order-charges").textContent = String(answer.charges);
}

async function pay() {
  const slow = document.getElementById("slow").checked;
  const fail = document.getElementById("fail").checked;
  const call = ++calls;
  setPending(1);
  try {
    await idempotentFetch(root.dataset.payUrl, {
      idempotencyKey: intentKey,
      headers: { "X-CSRFToken": root.dataset.csrf },
      json: { order: root.dataset.order, amount: 1999, delay: slow ? SLOW.delay : 0, fail: fail ? 1 : 0 },
      timeout: slow ? SLOW.timeout : 0,
      maxAttempts: 8,
      maxElapsed: 20000,
      onAttempt: (attempt) => logAttempt(call, attempt),
    });
  } catch (error) {
    console.error("payment gave up", error);
  } finally {
    await refreshCount();
    setPending(-1);
  }
}

document.getElementById("pay").addEventListener("click", pay);
document.getElementById("double").addEventListener("click", () => { pay(); pay(); });
document.getElementById("new-intent").addEventListener("click", () => { newIntent(); refreshCount(); });
newIntent();
refreshCount().then(() => { root.dataset.ready = "1"; });
