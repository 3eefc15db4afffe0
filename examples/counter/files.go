package main

import (
	"io"
	"net/http"
	"os"
	"path/filepath"
)

// registerFiles adds a tiny file API so tests can check what survives a
// suspend: durable volumes, the root filesystem overlay, and the identity
// files under /run/ate.
//
//	GET /files/{path...}  answers the file's bytes (404 if missing)
//	PUT /files/{path...}  writes the request body to the file, creating
//	                      parent directories; answers 204
//	POST /ask?action=suspend|pause asks the node, from inside the sandbox,
//	                      to suspend or pause this actor
func registerFiles(mux *http.ServeMux) {
	mux.HandleFunc("POST /ask", func(w http.ResponseWriter, r *http.Request) {
		resp, err := http.Post("http://169.254.17.1/v1/"+r.URL.Query().Get("action"), "text/plain", nil)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		defer resp.Body.Close()
		w.WriteHeader(resp.StatusCode)
		_, _ = io.Copy(w, resp.Body)
	})
	mux.HandleFunc("GET /files/{path...}", func(w http.ResponseWriter, r *http.Request) {
		b, err := os.ReadFile("/" + r.PathValue("path"))
		if err != nil {
			http.Error(w, err.Error(), http.StatusNotFound)
			return
		}
		w.Header().Set("Content-Type", "application/octet-stream")
		_, _ = w.Write(b)
	})
	mux.HandleFunc("PUT /files/{path...}", func(w http.ResponseWriter, r *http.Request) {
		p := "/" + r.PathValue("path")
		b, err := io.ReadAll(io.LimitReader(r.Body, 16<<20))
		if err == nil {
			err = os.MkdirAll(filepath.Dir(p), 0o755)
		}
		if err == nil {
			err = os.WriteFile(p, b, 0o644)
		}
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
}
