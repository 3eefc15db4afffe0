package cluster

import (
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// keepPodLogs copies every container log the kubelet writes under
// dir/pod-logs to dir/logs/pods, once a second until stop closes: the
// kubelet deletes a Pod's logs with the Pod, and a deleted worker Pod's
// log is often the evidence a failure needs. A final copy is made on stop.
func keepPodLogs(dir string, stop <-chan struct{}) (done <-chan struct{}) {
	d := make(chan struct{})
	offsets := map[string]int64{}
	copyNew := func() {
		src := filepath.Join(dir, "pod-logs")
		_ = filepath.WalkDir(src, func(p string, e os.DirEntry, err error) error {
			if err != nil || e.IsDir() || !strings.HasSuffix(p, ".log") {
				return nil
			}
			rel, _ := filepath.Rel(src, p)
			dst := filepath.Join(dir, "logs", "pods", rel)
			in, err := os.Open(p)
			if err != nil {
				return nil
			}
			defer in.Close()
			if _, err := in.Seek(offsets[p], io.SeekStart); err != nil {
				return nil
			}
			if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
				return nil
			}
			out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
			if err != nil {
				return nil
			}
			defer out.Close()
			n, _ := io.Copy(out, in)
			offsets[p] += n
			return nil
		})
	}
	go func() {
		defer close(d)
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				copyNew()
				return
			case <-tick.C:
				copyNew()
			}
		}
	}()
	return d
}
