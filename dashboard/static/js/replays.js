// Replays made from this browser tab: dead task id → newest replacement task id.
// The API does not list a dead task's replacements, so the dashboard remembers
// the ones it created (for this tab's session) to link to them.

const key = 'taskforge.replays';

function load() {
  try { return JSON.parse(sessionStorage.getItem(key)) || {}; } catch { return {}; }
}

/** rememberReplay records that dead task deadId was replayed as newId. */
export function rememberReplay(deadId, newId) {
  const m = load();
  m[deadId] = newId;
  try { sessionStorage.setItem(key, JSON.stringify(m)); } catch { /* storage full or off */ }
}

/** replayedAs returns the newest replacement of deadId made from this tab, if any. */
export function replayedAs(deadId) {
  return load()[deadId];
}
