// The console's JSON API: an {"error": ...} answer becomes a thrown Error.
async function answer(response) {
  let body = null;
  try { body = await response.json(); } catch { /* not JSON: said below */ }
  if (body && typeof body.error === "string" && !response.ok) {
    throw new Error(body.error);
  }
  if (!response.ok) throw new Error(`${response.status} ${response.statusText}`);
  return body;
}

export async function getJSON(path) {
  return answer(await fetch(path));
}

export async function sendJSON(method, path, body) {
  return answer(await fetch(path, {
    method, headers: { "Content-Type": "application/json" },
    body: body === undefined ? undefined : JSON.stringify(body),
  }));
}
