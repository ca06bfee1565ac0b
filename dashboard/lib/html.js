'use strict';

// Everything the dashboard renders goes through this file. Queue names,
// payloads, errors, role names and results are user data: the only way to
// put a value into a page is the html`` tag below, which escapes every
// interpolated value with escapeHtml() unless it is already Html (a fragment
// built by html`` itself). There is no other way to mark text as safe.

const ESCAPES = { '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' };

/** The one escape helper: text for an element's content or a quoted attribute value. */
function escapeHtml(value) {
  return String(value).replace(/[&<>"']/g, (c) => ESCAPES[c]);
}

/** A fragment of markup that is safe as it is (built by html``). */
class Html {
  constructor(markup) {
    this.markup = markup;
  }

  toString() {
    return this.markup;
  }
}

function render(value) {
  if (value instanceof Html) return value.markup;
  if (Array.isArray(value)) return value.map(render).join('');
  if (value === null || value === undefined || value === false) return '';
  return escapeHtml(value);
}

/**
 * Tagged template: html`<td>${name}</td>` escapes name; arrays are joined;
 * null, undefined and false render as nothing; nested html`` fragments are
 * kept as markup.
 */
function html(strings, ...values) {
  let out = strings[0];
  for (let i = 0; i < values.length; i++) out += render(values[i]) + strings[i + 1];
  return new Html(out);
}

/**
 * JSON for a <script type="application/json"> element: "<", ">" and "&" are
 * written as \u escapes so that no string in the data can close the element
 * ("</script>") or open a comment ("<!--"), and U+2028/U+2029 likewise. The
 * result is still JSON: JSON.parse(element.textContent) reads it back.
 */
function jsonScript(id, data) {
  const json = JSON.stringify(data).replace(
    /[<>&\u2028\u2029]/g,
    (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`,
  );
  return new Html(`<script type="application/json" id="${escapeHtml(id)}">${json}</script>`);
}

module.exports = { escapeHtml, html, jsonScript, Html };
