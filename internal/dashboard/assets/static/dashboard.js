// Substrate dashboard: refreshes the server-rendered content every few
// seconds and posts the actors' buttons. No framework, no build step.
(function () {
  "use strict";

  var content = document.getElementById("content");
  var status = document.getElementById("refresh-status");
  var errorBox = document.getElementById("error");
  var errorText = document.getElementById("error-text");
  var refreshMs = parseInt(document.body.dataset.refreshMs, 10) || 2000;
  var busy = 0; // actions in flight: refreshes wait, so a button does not vanish under the click

  function showError(msg) {
    errorText.textContent = msg;
    errorBox.hidden = false;
  }

  document.getElementById("error-close").addEventListener("click", function () {
    errorBox.hidden = true;
  });

  function refresh() {
    if (busy > 0) {
      return Promise.resolve();
    }
    return fetch("content", { cache: "no-store", credentials: "same-origin" })
      .then(function (resp) {
        if (resp.status === 401) {
          // The token expired or was revoked: back to the sign-in form.
          window.location.assign("login");
          throw new Error("signed out");
        }
        if (!resp.ok) {
          throw new Error("HTTP " + resp.status);
        }
        return resp.text();
      })
      .then(function (html) {
        if (busy > 0) {
          return;
        }
        content.innerHTML = html;
        status.textContent = "updated " + new Date().toTimeString().slice(0, 8);
        status.classList.remove("stale");
      })
      .catch(function (err) {
        status.textContent = "refresh failed (" + err.message + "); retrying";
        status.classList.add("stale");
      });
  }

  function act(button) {
    var action = button.dataset.action;
    var actor = button.dataset.actor;
    if (action === "delete" && !window.confirm("Delete actor " + actor + " and its snapshots?")) {
      return;
    }
    var parts = actor.split("/");
    var url = "actors/" + encodeURIComponent(parts[0]) + "/" + encodeURIComponent(parts[1]) + "/" + action;
    busy++;
    button.disabled = true;
    button.classList.add("pending");
    fetch(url, { method: "POST", credentials: "same-origin" })
      .then(function (resp) {
        return resp.text().then(function (body) {
          var result = {};
          try {
            result = JSON.parse(body);
          } catch (e) {
            result = { error: body.trim() || "HTTP " + resp.status };
          }
          if (!resp.ok) {
            showError(result.error || action + " " + actor + ": HTTP " + resp.status);
          } else {
            errorBox.hidden = true;
          }
        });
      })
      .catch(function (err) {
        showError(action + " " + actor + ": " + err.message);
      })
      .then(function () {
        busy--;
        return refresh();
      });
  }

  // Delegated: the table is replaced on every refresh.
  content.addEventListener("click", function (ev) {
    var button = ev.target.closest("button.act");
    if (button && !button.disabled) {
      act(button);
    }
  });

  setInterval(refresh, refreshMs);
})();
