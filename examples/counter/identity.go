package main

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
)

// registerIdentity adds what tests of actor identity (docs/security.md,
// Actor identity) need:
//
//	GET /mint?aud=X  asks the self-service endpoint's POST /v1/token for
//	                 a token with audience X (the default audience when
//	                 aud is absent) and answers with its answer
//	                 ({"token": …, "expiresAt": …}, or its refusal)
func registerIdentity(mux *http.ServeMux) {
	mux.HandleFunc("GET /mint", func(w http.ResponseWriter, r *http.Request) {
		var body io.Reader
		if aud := r.URL.Query().Get("aud"); aud != "" {
			b, err := json.Marshal(map[string]string{"audience": aud})
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			body = strings.NewReader(string(b))
		}
		relaySelfService(w, "/v1/token", body)
	})
}

// relaySelfService POSTs body to the self-service endpoint's path and
// answers w with its answer (502 when it cannot be reached).
func relaySelfService(w http.ResponseWriter, path string, body io.Reader) {
	resp, err := http.Post("http://169.254.17.1"+path, "application/json", body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	defer resp.Body.Close()
	w.Header().Set("Content-Type", resp.Header.Get("Content-Type"))
	w.WriteHeader(resp.StatusCode)
	_, _ = io.Copy(w, resp.Body)
}
