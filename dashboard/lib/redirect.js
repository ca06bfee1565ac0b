'use strict';

// Where the dashboard may send a browser after a login: one of its own pages,
// never another site. The login's `next` comes from the request (a query
// parameter, then the login form's hidden field), so it is checked as an
// attacker's string: the WHATWG URL parser (what browsers use) reads it
// against a placeholder origin, and only a path of that same origin under the
// dashboard's prefix is kept, as the parser serialises it. Anything else, or
// anything a browser might read differently from the parser, sends the
// browser to the dashboard's front page.

const ORIGIN = 'http://dashboard.invalid';
const MAX_LENGTH = 2048;

// Printable ASCII but the backslash: no control character (browsers drop
// tabs and newlines from a URL, so "/\t/evil" is "//evil" to them), no
// whitespace (a leading or trailing one included), no backslash (read as "/"
// in http URLs), nothing outside ASCII (no lookalike slashes or dots).
const ALLOWED_CHARACTERS = /^[\x21-\x5b\x5d-\x7e]+$/;

// After percent-decoding: no control character, no backslash, no empty path
// segment ("//"): not in a path of ours, and what a server or proxy that
// decodes a path before it uses it could turn into another host.
const DECODED_FORBIDDEN = /[\x00-\x1f\x7f\\]|\/\//;

/** text percent-decoded until it no longer changes (at most 3 times), or null if it cannot be. */
function fullyDecoded(text) {
  let current = text;
  for (let i = 0; i < 3; i++) {
    let next;
    try {
      next = decodeURIComponent(current);
    } catch {
      return null;
    }
    if (next === current) return current;
    current = next;
  }
  return null; // still encoded after three rounds: not a path of ours
}

/**
 * `next` if it is a path (and query) of the dashboard at prefix `base` ('' or
 * '/pgq'), in the URL parser's serialisation; `${base}/` otherwise.
 */
function sameOriginPath(next, base) {
  const home = `${base}/`;
  if (typeof next !== 'string' || next.length > MAX_LENGTH || !ALLOWED_CHARACTERS.test(next)) return home;
  // A path: not a scheme ("https:", "javascript:"), not a host ("//evil").
  if (!next.startsWith('/') || next.startsWith('//')) return home;
  let url;
  try {
    url = new URL(next, ORIGIN);
  } catch {
    return home;
  }
  if (url.origin !== ORIGIN || url.username !== '' || url.password !== '') return home;
  // Under the prefix after the parser resolved "." and ".." segments.
  if (!url.pathname.startsWith(home)) return home;
  const decoded = fullyDecoded(url.pathname);
  if (decoded === null || DECODED_FORBIDDEN.test(decoded)) return home;
  return url.pathname + url.search;
}

module.exports = { sameOriginPath };
