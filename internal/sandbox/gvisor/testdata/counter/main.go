// Command counter is the workload of the gvisor package tests: a static
// HTTP server on :8080 whose state lives only in memory (the counter) and
// in its root filesystem (/written), so a restore that loses either shows.
package main

import (
	"fmt"
	"net/http"
	"os"
	"sync/atomic"
)

func main() {
	var n atomic.Int64
	http.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "%d\n", n.Add(1))
	})
	http.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "ok %d\n", n.Load())
	})
	http.HandleFunc("/write", func(w http.ResponseWriter, r *http.Request) {
		if err := os.WriteFile("/written", []byte(r.URL.Query().Get("v")), 0o644); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
		}
	})
	// /put?p=PATH&v=V writes V to PATH; /cat?p=PATH reads it (mounts).
	http.HandleFunc("/put", func(w http.ResponseWriter, r *http.Request) {
		if err := os.WriteFile(r.URL.Query().Get("p"), []byte(r.URL.Query().Get("v")), 0o644); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
		}
	})
	http.HandleFunc("/cat", func(w http.ResponseWriter, r *http.Request) {
		b, err := os.ReadFile(r.URL.Query().Get("p"))
		if err != nil {
			http.Error(w, err.Error(), http.StatusNotFound)
			return
		}
		w.Write(b)
	})
	http.HandleFunc("/read", func(w http.ResponseWriter, r *http.Request) {
		b, err := os.ReadFile("/written")
		if err != nil {
			http.Error(w, err.Error(), http.StatusNotFound)
			return
		}
		w.Write(b)
	})
	fmt.Println("counter listening on :8080")
	if err := http.ListenAndServe(":8080", nil); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
