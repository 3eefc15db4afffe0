package main

import (
	"encoding/json"
	"io"
	"net/http"
	"sync"
)

// registerAlarms adds what tests of alarms (docs/alarms.md) need:
//
//	POST /set-alarm        relays its body ({"in": "3s", "path": "/tick"})
//	                       to the self-service endpoint's POST /v1/alarms
//	                       and answers with its answer
//	POST /alarm/{name...}  an alarm's delivery: recorded (path, Ate-Alarm-Id,
//	                       Ate-Alarm-Time, Ate-Alarm-Attempt); answers 204
//	GET  /alarms-received  the recorded deliveries, as a JSON array, in
//	                       arrival order
//
// The record lives in memory, so it is part of every Full checkpoint.
//
// /set-alarm only with setAlarm (a test endpoint: whoever reaches the
// actor would spend its alarm budget and wake it at will).
func registerAlarms(mux *http.ServeMux, setAlarm bool) {
	var mu sync.Mutex
	received := []map[string]string{}
	if setAlarm {
		mux.HandleFunc("POST /set-alarm", func(w http.ResponseWriter, r *http.Request) {
			relaySelfService(w, "/v1/alarms", io.LimitReader(r.Body, 8<<10))
		})
	}
	mux.HandleFunc("POST /alarm/{name...}", func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		received = append(received, map[string]string{
			"path": r.URL.RequestURI(), "id": r.Header.Get("Ate-Alarm-Id"),
			"time": r.Header.Get("Ate-Alarm-Time"), "attempt": r.Header.Get("Ate-Alarm-Attempt"),
		})
		mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	})
	mux.HandleFunc("GET /alarms-received", func(w http.ResponseWriter, _ *http.Request) {
		mu.Lock()
		b, err := json.Marshal(received)
		mu.Unlock()
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(append(b, '\n'))
	})
}
