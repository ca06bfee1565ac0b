'use strict';

// Every page: confirmations of dangerous actions, and the copy button of
// "copy as SQL". (No inline script: the Content-Security-Policy forbids it.)
(function () {
  document.addEventListener('submit', function (event) {
    var question = event.target.getAttribute('data-confirm');
    if (question && !window.confirm(question)) event.preventDefault();
  });

  document.addEventListener('click', function (event) {
    var button = event.target.closest('button[data-copy]');
    if (!button) return;
    var source = document.getElementById(button.getAttribute('data-copy'));
    if (!source) return;
    var done = function () {
      button.textContent = 'Copied';
    };
    var fallback = function () {
      source.select();
      if (document.execCommand && document.execCommand('copy')) done();
    };
    if (navigator.clipboard && window.isSecureContext) {
      navigator.clipboard.writeText(source.value).then(done, fallback);
    } else {
      fallback();
    }
  });
})();
