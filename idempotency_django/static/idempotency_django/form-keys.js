// The back button, on a page the browser fetches again: the form keeps the key it was sent with.
//
// A page sent never-cached (the admin's: Cache-Control: no-store) is fetched again when the
// person goes back to it, and the server renders a new key in its forms: sent again, the
// form would be a new request, and run again. This script remembers the keys the page held
// when it was first shown, in its own history entry (history.state, which the browser keeps
// for the entry however it gets the page back), and on a return through the history puts
// them back. A page opened anew (a link, a reload) keeps the keys it was rendered with.
// No dependencies, no build step: a classic script, run once per page however often included.
(function () {
  "use strict";
  if (window.idempotencyFormKeys) return;
  window.idempotencyFormKeys = true;
  var FIELDS = 'input[type="hidden"][name="idempotency_key"]';
  var SLOT = "idempotencyKeys";

  function cameBack() {
    var entries = performance.getEntriesByType("navigation");
    return entries.length > 0 && entries[0].type === "back_forward";
  }

  function keep() {
    var fields = Array.prototype.slice.call(document.querySelectorAll(FIELDS));
    if (fields.length === 0) return;
    var state = history.state !== null && typeof history.state === "object" ? history.state : {};
    var kept = state[SLOT];
    if (cameBack() && Array.isArray(kept) && kept.length === fields.length) {
      fields.forEach(function (field, i) { field.value = kept[i]; });
      return;
    }
    var saved = Object.assign({}, state);
    saved[SLOT] = fields.map(function (field) { return field.value; });
    history.replaceState(saved, "");
  }

  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", keep);
  } else {
    keep();
  }
})();
